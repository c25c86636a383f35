"""Every error sparkcap tells a person about, under one base.

A command ends on one of these with a single ``error: …`` line and a non-zero exit (``cli.main``
catches the base once); anything else escaping is a defect of sparkcap, not of its input. Each
subclass keeps the built-in base it had (``RuntimeError``, ``ValueError``, ``LookupError``), so
code that caught those still does. The whole tree is in this one file, on the lowest floor of
the layers: it imports nothing from sparkcap, so any module may raise any of them.

Errors that never reach a person (a stream's in-band error, a metrics text that does not parse,
a fetch that timed out) stay beside the code that raises and catches them.
"""

from __future__ import annotations

from pydantic_settings import SettingsError


class SparkcapError(Exception):
    """Bad input, an unreachable or hostile server, a busy or broken warehouse: said in one
    line that names the file, flag or server and the cause."""


# -- what a person named is not there ----------------------------------------------------------


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


# -- what a person gave: the environment, options, fleet files ---------------------------------


class BadEnvironment(SparkcapError, SettingsError):
    """A variable pydantic-settings cannot even parse (``SPARKCAP_DBT_VARS`` that is not
    JSON): the person's environment, worded in one line like any other input, where
    pydantic-settings' own ``SettingsError`` would escape the CLI as sparkcap's defect."""


class OptionError(SparkcapError, ValueError):
    """Command-line options that cannot be taken as given: a flag's text that does not parse
    (``--header``, ``--extra-body``), or options that only mean something together."""


class MissingSecret(SparkcapError, LookupError):
    """A header's value is to come from an environment variable that is not set (or holds
    what no HTTP header can carry): sending the request without it would measure an
    unauthenticated server, so it is an error, never a dropped header."""


class FleetError(SparkcapError, ValueError):
    """A fleet file that cannot be used; the message is one line with file and line."""


class CLIError(SparkcapError):
    """A user-facing failure: printed as one line, exit status 1."""


class Interrupted(CLIError):
    """Ctrl-C: one line saying what was kept, exit status 130 (the shell's 128 + SIGINT)."""


# -- capture: the servers measured and the processes that measure them -------------------------


class PreflightError(SparkcapError, RuntimeError):
    """The endpoint cannot be measured at all (unreachable, unknown model, bad auth)."""


class ClientProcessError(SparkcapError, RuntimeError):
    """A load-generating process died or answered out of turn: the wave cannot be trusted."""


class GGUFError(SparkcapError, ValueError):
    """A file that is not GGUF metadata this reader will take; the message names the file's
    byte offset and what was being read there."""


class ManagedProcessError(SparkcapError, RuntimeError):
    """A launched process exited early or never became ready; the message says which."""


class LocalServerError(SparkcapError, RuntimeError):
    """A build or start failure, with a message meant for one line of terminal output."""


# -- store: the warehouse and the lake ---------------------------------------------------------


class WarehouseBusy(SparkcapError, RuntimeError):
    """The warehouse cannot take a write now: another process holds the DuckDB write lock
    (or, as :class:`StorageError`, its file or disk failed). A wave that meets it waits in
    the spool for the next ``stage``."""


class StorageError(WarehouseBusy):
    """A file sparkcap keeps its records in (the warehouse, a spooled wave) that cannot be
    read or written: corrupt or not DuckDB, a read-only file system, a full disk. One line
    naming the file and the operating system's cause (``ENOSPC``), never DuckDB's follow-on
    error (``cannot rollback - no transaction is active``). A subclass of
    :class:`WarehouseBusy` because the answer is the same: the wave stays in the spool and
    the command ends with one ``error:`` line."""


class StaleWarehouse(SparkcapError, RuntimeError):
    """A reader's query does not bind: the file's marts (or raw tables) were built by a
    sparkcap that lacked a column this one reads. Said in one line with the command that
    rebuilds them, never DuckDB's binder traceback: columns are only ever added, so a build
    by this sparkcap (which also adds any raw column) is the whole remedy."""


class LakeError(SparkcapError, RuntimeError):
    """A lake that cannot be read or written (one line, names the URL)."""


# -- transform and check: dbt, the live judge, data quality ------------------------------------


class BuildError(SparkcapError, RuntimeError):
    """dbt failed; the message names the failing models or tests."""


class JudgeError(SparkcapError, RuntimeError):
    """dbt could not compile the search rule (the project or its vars are broken)."""


class DataQualityFailed(SparkcapError, RuntimeError):
    """A blocking expectation failed for this run (the night goes on; its result says so)."""


class OfflineError(SparkcapError, RuntimeError):
    """A page still loads something from the network."""


# -- publish: reading the marts and writing what they say --------------------------------------


class QueryFailed(SparkcapError, RuntimeError):
    """Ad-hoc SQL (``sparkcap sql``) DuckDB refused: its first line, the rest is its noise."""


class ReportError(SparkcapError, RuntimeError):
    """The marts hold nothing to report for the requested run."""


class ExportFailed(SparkcapError, OSError):
    """The textfile could not be written (a folder, no such folder, no permission, a full
    disk): said in one line naming the file; a file already there is left as it was."""


# -- a night: its schedule, its distributed children, replays, the self-test -------------------


class StaleSchedule(SparkcapError, RuntimeError):
    """prefect.yaml says other than the fleet files' schedules (``prefect-yaml --check``)."""


class DistributedError(SparkcapError, RuntimeError):
    """A distributed night that cannot start (no Prefect server, no pool); one line."""


class ReplayError(SparkcapError):
    """Nothing to replay: no plan, or no deployment the plan sends streams to."""


class CalibrationError(SparkcapError, RuntimeError):
    """The self-test could not find a budget (even its smallest wave was spoiled, or the
    simulator stopped answering), or a budget file that cannot be read."""
