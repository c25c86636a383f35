"""The simulator's text: a prompt's token count, whether it reads as code, and the words a
stream's synthetic answer is made of. There is no tokenizer: a token is ``CHARS_PER_TOKEN``
characters, and ``usage`` and ``/tokenize`` report that count.
"""

from __future__ import annotations

import math

CHARS_PER_TOKEN = 4
CODE_WORDS = (
    "def ",
    "return ",
    "self",
    ".",
    "(",
    ")",
    ":",
    "\n    ",
    "for ",
    "in ",
    "if ",
    "else",
    "x",
    "value",
    "items",
    "=",
    "+",
    "1",
    "None",
    "key",
    "[",
    "]",
    ", ",
    "import ",
    "class ",
)
PROSE_WORDS = (
    "the ",
    "light",
    "house ",
    "and ",
    "of ",
    "a ",
    "river ",
    "was ",
    "in ",
    "that ",
    "to ",
    "with ",
    "morning ",
    "slowly ",
    "town ",
    ", ",
    ". ",
    "people ",
    "long ",
    "sea ",
    "it ",
)


def count_prompt_tokens(text: str) -> int:
    """Tokens a prompt counts: its characters / ``CHARS_PER_TOKEN``, rounded up, at least 1."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def looks_like_code(text: str) -> bool:
    """Whether a prompt asks for code (and so draws code's acceptance and words)."""
    t = text.lower()
    return "python" in t or "code" in t or "function" in t or "implement" in t
