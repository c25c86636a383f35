"""The measured side of every timing test's tolerance.

A client-timing test holds a measured figure (a decode rate against the server's log, a send
lag, a share) inside a bound; the bound is only as honest as the spread it was set from. Each
such assertion goes through :func:`within`, which asserts as before and, when
``SPARKCAP_TIMING_SPREAD`` names a file, appends the figure and its bounds as one JSON line.
``benchmarks/timing_spread.py`` runs the timing tests many times beside a CPU burner and prints
each figure's worst against its bound: the tolerance's reason, measured.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SPREAD_ENV = "SPARKCAP_TIMING_SPREAD"


def _test_id() -> str:
    current = os.environ.get("PYTEST_CURRENT_TEST", "?")
    return current.rsplit(" ", 1)[0]  # "path::name[param] (call)" -> "path::name[param]"


def record(
    measure: str, value: float | None, low: float | None = None, high: float | None = None
) -> None:
    """Record a figure a test's verdicts rest on without asserting it (a wave's timing error
    bound, which the marts judge): its spread says how near the machine came to the bound."""
    path = os.environ.get(SPREAD_ENV)
    if path:
        line = {"test": _test_id(), "measure": measure, "value": value, "low": low, "high": high}
        with Path(path).open("a", encoding="utf-8") as fh:  # one short write: whole lines
            fh.write(json.dumps(line) + "\n")


def within(
    measure: str,
    value: float | None,
    low: float | None = None,
    high: float | None = None,
    context: object = None,
) -> None:
    """Assert ``low <= value <= high`` (either bound may be open) and record the figure.

    ``measure`` names the figure for the spread report; ``context`` goes into the failure
    message (the rows the figure came from)."""
    record(measure, value, low, high)
    assert value is not None, (measure, context)
    assert low is None or value >= low, (measure, value, f">= {low}", context)
    assert high is None or value <= high, (measure, value, f"<= {high}", context)
