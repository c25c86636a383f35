"""The consoles every line sparkcap prints goes through: text, never markup, and no control
character reaching the terminal."""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console

# C0 and C1 control characters but tab and newline: an escape sequence in a server's model id
# or error text would otherwise drive the terminal (clear it, retitle it, hide what follows)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with every control character spelled out (``\x1b``), so it prints as text."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class _TextConsole(Console):
    def print(self, *objects: Any, **options: Any) -> None:
        super().print(*(visible(o) if isinstance(o, str) else o for o in objects), **options)


def text_console(**options: Any) -> Console:
    """A Rich console that prints every string as text, never as markup: model ids, SQL cells,
    file names and error messages come from users, files and servers, and a ``[/oops]`` or
    ``[rank0]`` in them must neither raise nor vanish, nor an escape sequence reach the
    terminal (:func:`visible`). Every console sparkcap prints through is made here."""
    return _TextConsole(markup=False, highlight=False, **options)
