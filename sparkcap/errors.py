"""The one base of every error sparkcap tells a person about.

A command ends on one of these with a single ``error: …`` line and a non-zero exit (``cli.main``
catches the base once); anything else escaping is a defect of sparkcap, not of its input. Each
subclass keeps the built-in base it had (``RuntimeError``, ``ValueError``, ``LookupError``), so
code that caught those still does.
"""

from __future__ import annotations


class SparkcapError(Exception):
    """Bad input, an unreachable or hostile server, a busy or broken warehouse: said in one
    line that names the file, flag or server and the cause."""


class NotFound(SparkcapError, LookupError):
    """A run, a warehouse row or a part a person named is not there: their mistake (or an
    empty warehouse), said as such, where a bare ``LookupError`` would be sparkcap's bug."""


class MissingFile(SparkcapError, FileNotFoundError):
    """A file or folder a person named (a warehouse, a CA bundle) or sparkcap ships is not
    there; a bare ``FileNotFoundError`` elsewhere stays a traceback, a defect to fix."""


class NotBuilt(NotFound):
    """The marts a command reads are not built for what it was asked (an empty warehouse, a
    run whose build stopped, one built by an older sparkcap): said with the build to run,
    never read as "measured nothing"."""
