"""``sparkcap probe``'s flags as its command line hands them to ``probe_flags``."""

from __future__ import annotations

from typing import Any


def probe_cli_flags(**given: Any) -> dict[str, Any]:
    """Every flag of ``sparkcap probe`` (the four probes share them), ``given`` ones as given
    and the rest at values of their own: a test of one probe's options sees which flags it
    reads and that the others' never reach it. The two background flags and ``--max-tokens``
    are unset (None) unless given, as on a command line that leaves them out."""
    flags: dict[str, Any] = dict(
        prompt_tokens=4000,
        background_streams=None,
        background_tokens=None,
        probe_interval_s=0.5,
        warm_requests=3,
        concurrency=8,
        lengths="400,1000",
        workload="prose",
        code_share=0.5,
        trials=2,
        max_tokens=None,
    )
    flags.update(given)
    return flags
