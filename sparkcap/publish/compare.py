"""``sparkcap compare RUN_A RUN_B``: the study's before/after question in one command.

Per deployment × workload × level: the change in median decode rate and aggregate
throughput; per deployment × workload: the change in capacity, beside each run's verdict (a
run that measured nothing has no change to show); per deployment: the change in
prefill throughput (from the prefill-interference probe) with link health beside it. Read
from the marts, so both runs must have been built.

``--fail-on regression`` (:func:`regressions`) turns it into a gate for CI: the later run
regressed where a capacity it measured lies wholly below the earlier run's (each capacity with
its interval, ``fct_capacity``'s bootstrap or search bracket), where it measured nothing that
the earlier run measured or has no row for it at all (a deployment down, or another fleet's
night: the words then name both fleets), or where ``fct_changes`` flagged it slower or lower
than its baseline. A gate that would compare nothing (a run without built capacities, an
earlier run that measured none) stops with one line instead of passing. Each of those is dbt's
judgement: the capacities' is the macro ``regression_gate`` (``fct_capacity_regressions`` runs
it on each fleet's night against that fleet's night before; here it is compiled and run on the
two runs given), the flags are ``fct_changes``'; nothing is re-tested here, and the SQL is in
:mod:`sparkcap.publish.marts.compare`.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import duckdb
import pandas as pd

from sparkcap.errors import NotBuilt
from sparkcap.publish.marts import compare as compare_marts
from sparkcap.publish.marts import has_mart, require_runs
from sparkcap.store.connection import open_warehouse


class Regression(NamedTuple):
    """One reason the later run fails a ``--fail-on regression`` gate, in words."""

    deployment: str
    workload: str
    words: str


def _interval(capacity: int, low: int, high: int | None) -> str:
    if high is None:  # every level tested passed
        return f"≥ {capacity}" if low == capacity else f"≥ {capacity} [{low}, —]"
    if low == high == capacity:
        return f"{capacity}"
    return f"{capacity} [{low}, {high}]"


def _change_words(
    subject: str,
    concurrency: int | None,
    change_pct: float | None,
    p_value: float | None,
    also: str | None,
    verdict: str | None,
) -> str:
    """A flagged change as fct_changes words it: its verdict states the size, the p-value and
    what else changed, so nothing is added to it (the gate once printed "what else changed"
    twice). Only a change without a verdict is put in words here, from its columns."""
    if verdict:
        return f"{subject}: {verdict}"
    what = subject if concurrency is None else f"{subject} at {concurrency} streams"
    size = "" if change_pct is None else f" {change_pct:+.1f} %"
    p_words = "" if p_value is None else f", p {p_value:.2g}"
    also_words = f" (also changed: {also})" if also else ""
    return f"{what}{size}{p_words} vs its baseline: flagged{also_words}"


def regressions(db_path: Path, run_a: str, run_b: str) -> list[Regression]:
    """Where ``run_b`` is worse than ``run_a`` by the marts' own judgement (see the module's
    docstring); ``fct_changes``' flags count once that mart is built."""
    found: list[Regression] = []
    with open_warehouse(db_path, read_only=True) as con:
        require_runs(con, db_path, [run_a, run_b])
        _require_compared(con, db_path, run_a, run_b)
        other_fleet = _other_fleet_words(compare_marts.fleet_names(con, run_a, run_b), run_a, run_b)
        for pair in compare_marts.regressed_pairs(con, run_a, run_b):
            earlier = _interval(
                pair.earlier_capacity_streams, pair.earlier_low_streams, pair.earlier_high_streams
            )
            if pair.gate_verdict == "missing":
                words = (
                    f"not in {run_b}'s night ({earlier} streams in "
                    f"{run_a}): never measured, so never shown to hold{other_fleet}"
                )
            elif pair.gate_verdict == "not measured":
                words = f"capacity not measured in {run_b} ({earlier} streams in {run_a})"
            else:
                # 'below': the later run measured the pair, so its capacity has an interval
                assert pair.later_capacity_streams is not None
                assert pair.later_low_streams is not None
                later = _interval(
                    pair.later_capacity_streams, pair.later_low_streams, pair.later_high_streams
                )
                words = f"capacity {later} streams, below {earlier} in {run_a}"
            found.append(Regression(pair.deployment, pair.workload, words))
        for change in compare_marts.flagged_slower(con, run_b):
            found.append(
                Regression(
                    change.deployment,
                    change.workload,
                    _change_words(
                        change.subject,
                        change.concurrency,
                        change.change_pct,
                        change.p_value,
                        change.what_else_changed,
                        change.verdict,
                    ),
                )
            )
    return found


def _fleet_words(fleet: str | None) -> str:
    return "no fleet (an ad-hoc sweep)" if fleet is None else f"fleet {fleet!r}"


def _other_fleet_words(fleets: dict[str, str | None], run_a: str, run_b: str) -> str:
    """Why a pair can be missing without anything going down: the two runs measured different
    fleets (each night's own chain is ``fct_capacity_regressions``, by fleet)."""
    if run_a not in fleets or run_b not in fleets or fleets[run_a] == fleets[run_b]:
        return ""
    return (
        f" ({run_a} measured {_fleet_words(fleets[run_a])}, {run_b} {_fleet_words(fleets[run_b])})"
    )


def _require_compared(
    con: duckdb.DuckDBPyConnection, db_path: Path, run_a: str, run_b: str
) -> None:
    """A gate that compared nothing never passes: both runs need built capacities, and the
    earlier run a measured one (else there is nothing a later run could fall below)."""
    if not has_mart(con, "fct_capacity"):
        raise NotBuilt(f"{db_path} has no built capacities: run `sparkcap build --db {db_path}`")
    built = compare_marts.built_capacities(con, run_a, run_b)
    for run in (run_a, run_b):
        if run not in built:
            raise NotBuilt(
                f"run {run} has no built capacity (never built, or its build stopped): run "
                f"`sparkcap build --db {db_path}`; the gate compares nothing until it is"
            )
    if built[run_a].n_measured == 0:
        raise NotBuilt(
            f"run {run_a} measured no capacity, so the gate has nothing to compare {run_b} "
            "against: pick an earlier run that measured one"
        )


def compare(db_path: Path, run_a: str, run_b: str) -> dict[str, pd.DataFrame]:
    """The two runs side by side: levels, capacity, and prefill and links, by name."""
    with open_warehouse(db_path, read_only=True) as con:
        require_runs(con, db_path, [run_a, run_b])
        return compare_marts.side_by_side(con, run_a, run_b)
