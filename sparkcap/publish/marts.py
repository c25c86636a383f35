"""Typed readers of the marts: what the CLI, the report, ``compare`` and the Prefect artifact
print is read here, once, from the models dbt built (read-only).

Each reader returns rows whose fields are the mart's columns, units in their names, as Python
types (a DuckDB ``DECIMAL`` threshold is a float, so it prints ``20``, never ``20.0``); the
words a person reads are made from them in :mod:`sparkcap.publish.text`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import duckdb

from sparkcap.errors import NotFound, SparkcapError
from sparkcap.store import warehouse


class QueryFailed(SparkcapError, RuntimeError):
    """Ad-hoc SQL (``sparkcap sql``) DuckDB refused: its first line, the rest is its noise."""


class LevelRow(NamedTuple):
    """``marts.fct_levels``: one concurrency level of a deployment × workload."""

    deployment: str
    workload: str
    concurrency: int
    n_valid_trials: int
    n_trials: int
    median_decode_tok_s: float | None
    min_decode_tok_s: float | None
    median_ttft_s: float | None
    n_failed_streams: int
    any_queued: bool | None


class CapacityRow(NamedTuple):
    """``marts.fct_capacity``: a deployment × workload's capacity and its verdict in words."""

    deployment: str
    workload: str
    threshold_tok_s: float
    capacity_streams: int
    is_lower_bound: bool
    is_below_lowest_level: bool
    first_failing_level: int | None
    method: str
    level_capacity_streams: int
    search_low_streams: int | None
    search_high_streams: int | None
    n_straddling_levels: int
    sustain_result: str
    is_measured: bool
    capacity_verdict: str
    capacity_interpolated_streams: int | None
    n_valid_trials: int


class BottleneckRow(NamedTuple):
    """``marts.fct_bottlenecks``: why a deployment × workload's capacity is what it is."""

    deployment: str
    workload: str
    capacity_streams: int | None
    limit_level: int | None
    bottleneck: str
    confidence: str | None
    evidence: str | None
    advice: str | None
    limit_level_tok_s: float | None
    limit_level_bound_tok_s: float | None
    limit_level_share_of_bound: float | None
    bound_capacity_streams: int | None
    bound_flags: str | None
    unavailable_evidence: str | None


class LevelBoundRow(NamedTuple):
    """``marts.fct_level_bounds``: a measured level beside its memory-bandwidth bound."""

    deployment: str
    workload: str
    concurrency: int
    median_decode_tok_s: float | None
    bound_decode_tok_s: float | None
    share_of_bound: float | None
    threshold_tok_s: float


class FleetRow(NamedTuple):
    """``marts.fct_fleet_capacity``: the fleet's capacity for one workload."""

    workload: str
    capacity_streams: int
    threshold_tok_s: float
    extrapolated_deployments: str | None
    not_measured_deployments: str | None


class FailedStep(NamedTuple):
    """``marts.fct_step_outcomes`` where ``is_failed``: a part of the night that is missing."""

    deployment: str | None  # None: the night's own step (the sweep of every deployment)
    outcome: str
    reason: str | None


class SearchDisagreement(NamedTuple):
    """A ``marts.fct_search_path`` step whose live verdict (what the search acted on) is not
    the verdict of record (dbt's, which also weighs data quality and queueing from token
    overlap): the path the search took is not the one the record would have taken."""

    deployment: str
    workload: str
    kind: str
    concurrency: int
    live_verdict: str | None
    verdict: str
    verdict_reason: str | None
    invalid_reasons: str | None


class LinkRow(NamedTuple):
    """``marts.fct_link_health``: one link's check, judged by dbt (``int_link_health``)."""

    deployment: str
    link: str
    nominal_gbps: float
    achieved_gbps: float | None  # None: the probe measured nothing (its error says why)
    healthy: bool
    error: str | None


class RecordedRun(NamedTuple):
    """What ``raw`` holds of a run right now (the marts may not be built yet)."""

    run_id: str
    status: str | None  # None: no row in raw.runs (the run never started)
    n_waves: int


class RunRow(NamedTuple):
    """``raw.runs``: one run as recorded (the report's header and its run checks)."""

    run_id: str
    started_at: datetime
    finished_at: datetime | None
    status: str
    status_reason: str | None
    sparkcap_version: str | None


class QueryResult(NamedTuple):
    columns: list[str]
    rows: list[tuple[Any, ...]]


_CAPACITY_SQL = (
    "select deployment, workload, threshold_tok_s::double, capacity_streams, is_lower_bound, "
    "is_below_lowest_level, first_failing_level, method, level_capacity_streams, "
    "search_low_streams, search_high_streams, n_straddling_levels, sustain_result, "
    "is_measured, capacity_verdict, capacity_interpolated, n_valid_trials "
    "from marts.fct_capacity where run_id = ? order by deployment, workload"
)


def levels(db_path: Path, run_id: str) -> list[LevelRow]:
    with warehouse.open_warehouse(db_path, read_only=True) as con:
        rows = con.execute(
            f"select {', '.join(LevelRow._fields)} from marts.fct_levels where run_id = ? "
            "order by deployment, workload, concurrency",
            [run_id],
        ).fetchall()
    return [LevelRow(*r) for r in rows]


def capacities(db_path: Path, run_id: str) -> list[CapacityRow]:
    with warehouse.open_warehouse(db_path, read_only=True) as con:
        rows = con.execute(_CAPACITY_SQL, [run_id]).fetchall()
    return [CapacityRow(*r) for r in rows]


def fleet_capacities(db_path: Path, run_id: str) -> list[FleetRow]:
    with warehouse.open_warehouse(db_path, read_only=True) as con:
        rows = con.execute(
            "select workload, capacity_streams, threshold_tok_s::double, "
            "extrapolated_deployments, not_measured_deployments from marts.fct_fleet_capacity "
            "where run_id = ? order by workload",
            [run_id],
        ).fetchall()
    return [FleetRow(*r) for r in rows]


def bottlenecks(db_path: Path, run_id: str) -> list[BottleneckRow]:
    with warehouse.open_warehouse(db_path, read_only=True) as con:
        rows = con.execute(
            f"select {', '.join(BottleneckRow._fields)} from marts.fct_bottlenecks "
            "where run_id = ? order by deployment, workload",
            [run_id],
        ).fetchall()
    return [BottleneckRow(*r) for r in rows]


def level_bounds(db_path: Path, run_id: str) -> list[LevelBoundRow]:
    cols = ", ".join(LevelBoundRow._fields).replace("threshold_tok_s", "threshold_tok_s::double")
    with warehouse.open_warehouse(db_path, read_only=True) as con:
        rows = con.execute(
            f"select {cols} from marts.fct_level_bounds where run_id = ? "
            "order by deployment, workload, concurrency",
            [run_id],
        ).fetchall()
    return [LevelBoundRow(*r) for r in rows]


def unmeasured_pairs(db_path: Path, run_id: str) -> list[CapacityRow]:
    """Deployment × workloads swept without one valid measurement (every request refused,
    every stream broken, every trial spoiled): their capacity 0 is no measurement, so a sweep
    or night that holds one has not done its job."""
    return [c for c in capacities(db_path, run_id) if not c.is_measured]


def search_disagreements(db_path: Path, run_id: str) -> list[SearchDisagreement]:
    with warehouse.open_warehouse(db_path, read_only=True) as con:
        rows = con.execute(
            f"select {', '.join(SearchDisagreement._fields)} from marts.fct_search_path "
            "where run_id = ? and not live_agrees order by deployment, workload, search_step",
            [run_id],
        ).fetchall()
    return [SearchDisagreement(*r) for r in rows]


def failed_steps(db_path: Path, run_id: str) -> list[FailedStep]:
    with warehouse.open_warehouse(db_path, read_only=True) as con:
        rows = con.execute(
            "select deployment, outcome, reason from marts.fct_step_outcomes "
            "where run_id = ? and is_failed order by deployment, step",
            [run_id],
        ).fetchall()
    return [FailedStep(*r) for r in rows]


def link_health(db_path: Path, run_id: str) -> list[LinkRow]:
    with warehouse.open_warehouse(db_path, read_only=True) as con:
        rows = con.execute(
            f"select {', '.join(LinkRow._fields)} from marts.fct_link_health where run_id = ? "
            "order by deployment, link",
            [run_id],
        ).fetchall()
    return [LinkRow(*r) for r in rows]


def recorded_run(db_path: Path, run_id: str) -> RecordedRun | None:
    """The run's status and staged waves, or ``None`` when the warehouse cannot be read just
    now (busy, missing, broken): said after a Ctrl-C, when only what is certain may be said."""
    try:
        with warehouse.open_warehouse(db_path, read_only=True) as con:
            run = con.execute("select status from raw.runs where run_id = ?", [run_id]).fetchone()
            waves = con.execute(
                "select count(*) from raw.waves where run_id = ?", [run_id]
            ).fetchone()
    except Exception:  # whatever stops the read, the interrupted line still has to be said
        return None
    return RecordedRun(run_id, None if run is None else str(run[0]), int(waves[0]) if waves else 0)


def runs(con: duckdb.DuckDBPyConnection, run_ids: Sequence[str]) -> list[RunRow]:
    """The recorded runs among ``run_ids``, oldest first (a name that is none is left out)."""
    rows = con.execute(
        f"select {', '.join(RunRow._fields)} from raw.runs where list_contains(?, run_id) "
        "order by started_at",
        [list(run_ids)],
    ).fetchall()
    return [RunRow(*r) for r in rows]


def require_runs(con: duckdb.DuckDBPyConnection, db_path: Path, run_ids: Sequence[str]) -> None:
    """Both runs of a comparison are recorded, or one line names those that are not."""
    known = {r.run_id for r in runs(con, run_ids)}
    missing = [r for r in run_ids if r not in known]
    if missing:
        raise NotFound(f"no such run(s) in {db_path}: {', '.join(missing)}")


def query(db_path: Path, sql: str) -> QueryResult | None:
    """Ad-hoc SQL, read-only; ``None`` for a statement that returns no rows."""
    with warehouse.open_warehouse(db_path, read_only=True) as con:
        try:
            cur = con.execute(sql)
        except duckdb.Error as exc:
            raise QueryFailed(f"SQL failed: {str(exc).splitlines()[0]}") from None
        if cur.description is None:
            return None
        return QueryResult([d[0] for d in cur.description], cur.fetchall())
