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

from sparkcap.errors import NotFound, QueryFailed
from sparkcap.store import connection as warehouse


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
    # agent levels only: the turn TTFT at this quantile is what their rule holds to the ceiling
    ttft_quantile: float | None
    ttft_quantile_s: float | None
    ttft_ceiling_s: float | None
    meets_ttft_ceiling: bool | None
    # the turn TTFTs behind that quantile and the fewest that support it (dbt macro
    # tail_min_samples): below, the figure is "not enough samples", never printed
    ttft_quantile_samples: int | None
    ttft_quantile_min_samples: int | None
    ttft_quantile_is_supported: bool | None
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
    is_confirmed: bool | None
    overruled_evidence: str | None


class SessionCacheRow(NamedTuple):
    """``marts.fct_session_cache``: the prefix cache an agent wave found against its plan's."""

    deployment: str
    concurrent_sessions: int
    trial: int
    attempt: int
    cache_state: str | None
    cache_hit_share: float | None
    reset_verdict: str | None
    is_flagged: bool
    flag_reason: str | None


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
    # 0: no deployment measured this workload, and the sum is no measurement at all
    n_measured_deployments: int


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


class ChangeRow(NamedTuple):
    """``marts.fct_changes``: a night against its baseline on one subject ('level' at one
    concurrency, 'capacity' or 'drift'); ``is_change`` and ``direction`` are dbt's judgement."""

    deployment: str
    workload: str
    subject: str
    concurrency: int | None
    baseline_value: float | None
    baseline_low: float | None
    baseline_high: float | None
    value: float | None
    change_pct: float | None
    p_value: float | None
    is_change: bool
    direction: str | None
    n_baseline_runs: int | None
    what_else_changed: str | None
    verdict: str | None
    is_tested: bool = True  # compared at all (enough baseline nights, a value)


class TierRow(NamedTuple):
    """``marts.fct_capacity_tiers``: the capacity at one per-stream threshold and TTFT p90
    ceiling (``None``: no ceiling), from the night's stored tokens."""

    deployment: str
    workload: str
    threshold_tok_s: float
    ttft_p90_ceiling_s: float | None
    capacity_streams: int | None
    is_lower_bound: bool | None
    is_measured: bool
    is_threshold_of_record: bool


class EnergyAtCapacityRow(NamedTuple):
    """``marts.fct_energy_at_capacity``: energy figures at a pair's capacity point; a
    ``status`` of 'unavailable' leaves them ``None`` (never 0) and says why."""

    deployment: str
    workload: str
    capacity_streams: int | None
    tokens_per_joule: float | None
    streams_per_kw: float | None
    status: str
    unavailable_reason: str | None
    # the range the power readings' timing allows; None where unbounded or not kept
    streams_per_kw_low: float | None = None
    streams_per_kw_high: float | None = None


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
    rows = _mart_rows(
        db_path,
        "fct_fleet_capacity",
        "workload, capacity_streams, threshold_tok_s::double, extrapolated_deployments, "
        "not_measured_deployments, n_measured_deployments",
        "where run_id = ? order by workload",
        [run_id],
    )
    return [FleetRow(*r) for r in rows]


def bottlenecks(db_path: Path, run_id: str) -> list[BottleneckRow]:
    rows = _mart_rows(
        db_path,
        "fct_bottlenecks",
        ", ".join(BottleneckRow._fields),
        "where run_id = ? order by deployment, workload",
        [run_id],
    )
    return [BottleneckRow(*r) for r in rows]


def session_caches(db_path: Path, run_id: str) -> list[SessionCacheRow]:
    """Every agent wave's cache verdict (none from a warehouse built before 0.7)."""
    with warehouse.open_warehouse(db_path, read_only=True) as con:
        if not has_mart(con, "fct_session_cache"):
            return []
        rows = con.execute(
            f"select {', '.join(SessionCacheRow._fields)} from marts.fct_session_cache "
            "where run_id = ? order by deployment, concurrent_sessions, trial, attempt",
            [run_id],
        ).fetchall()
    return [SessionCacheRow(*r) for r in rows]


def level_bounds(db_path: Path, run_id: str) -> list[LevelBoundRow]:
    cols = ", ".join(LevelBoundRow._fields).replace("threshold_tok_s", "threshold_tok_s::double")
    with warehouse.open_warehouse(db_path, read_only=True) as con:
        rows = con.execute(
            f"select {cols} from marts.fct_level_bounds where run_id = ? "
            "order by deployment, workload, concurrency",
            [run_id],
        ).fetchall()
    return [LevelBoundRow(*r) for r in rows]


def has_mart(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether dbt has built ``marts.<name>``: a warehouse built by an older sparkcap, or
    whose build stopped part-way, lacks the newer marts, and their readers then read none."""
    return warehouse.has_table(con, "marts", name)


def _mart_rows(db_path: Path, mart: str, select: str, rest: str, params: list[Any]) -> list[Any]:
    with warehouse.open_warehouse(db_path, read_only=True) as con:
        if not has_mart(con, mart):
            return []
        return con.execute(f"select {select} from marts.{mart} {rest}", params).fetchall()


def changes(db_path: Path, run_id: str, *, flagged_only: bool = False) -> list[ChangeRow]:
    """The night's comparisons with its baseline (``flagged_only``: dbt's flagged changes);
    none before ``fct_changes`` is built."""
    flagged = "and is_change " if flagged_only else ""
    rows = _mart_rows(
        db_path,
        "fct_changes",
        ", ".join(ChangeRow._fields),
        f"where run_id = ? {flagged}order by deployment, workload, subject, concurrency",
        [run_id],
    )
    return [ChangeRow(*r) for r in rows]


def capacity_tiers(db_path: Path, run_id: str) -> list[TierRow]:
    cols = ", ".join(TierRow._fields)
    for decimal in ("threshold_tok_s", "ttft_p90_ceiling_s"):
        cols = cols.replace(decimal, f"{decimal}::double", 1)
    rows = _mart_rows(
        db_path,
        "fct_capacity_tiers",
        cols,
        "where run_id = ? order by deployment, workload, threshold_tok_s, "
        "ttft_p90_ceiling_s nulls last",
        [run_id],
    )
    return [TierRow(*r) for r in rows]


def energy_at_capacity(db_path: Path, run_id: str) -> list[EnergyAtCapacityRow]:
    rows = _mart_rows(
        db_path,
        "fct_energy_at_capacity",
        ", ".join(EnergyAtCapacityRow._fields),
        "where run_id = ? order by deployment, workload",
        [run_id],
    )
    return [EnergyAtCapacityRow(*r) for r in rows]


def latest_built_run(db_path: Path) -> str:
    """The newest run the marts hold a capacity of (what ``report`` and ``export`` show when
    no run is named)."""
    with warehouse.open_warehouse(db_path, read_only=True) as con:
        row = None
        if has_mart(con, "fct_capacity"):
            row = con.execute(
                "select c.run_id from marts.fct_capacity c join raw.runs r using (run_id) "
                "order by r.started_at desc limit 1"
            ).fetchone()
    if row is None:
        raise NotFound(f"no capacity results in {db_path} yet (run `sparkcap build` first)")
    return str(row[0])


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


def run_row(db_path: Path, run_id: str) -> RunRow:
    """``raw.runs``' row of one run, or one line saying the warehouse has no such run."""
    with warehouse.open_warehouse(db_path, read_only=True) as con:
        found = runs(con, [run_id])
    if not found:
        raise NotFound(f"no such run in {db_path}: {run_id}")
    return found[0]


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


class ContextLadderRow(NamedTuple):
    """``marts.fct_context_ladder_summary``: one ladder's largest prompt within the TTFT
    ceiling; a ``status`` of 'unavailable' leaves the figures ``None`` and says why."""

    deployment: str
    context_tokens: int | None
    context_source: str
    ttft_ceiling_s: float
    n_rungs: int
    n_measured_rungs: int
    n_not_cold_rungs: int
    largest_cold_prompt_tokens: int | None
    largest_warm_prompt_tokens: int | None
    first_failing_rung: int | None
    refused_rung_tokens: int | None
    limited_by: str
    status: str
    status_reason: str | None


def context_ladders(db_path: Path, run_id: str) -> list[ContextLadderRow]:
    rows = _mart_rows(
        db_path,
        "fct_context_ladder_summary",
        ", ".join(ContextLadderRow._fields),
        "where run_id = ? order by deployment, wave_id",
        [run_id],
    )
    return [ContextLadderRow(*r) for r in rows]


class PlanRow(NamedTuple):
    """``marts.fct_plan``: the most streams of the mix the fleet carries at the threshold,
    what limits it, and whether the long prompts fit the fleet's prefill budget."""

    run_id: str
    code_share: float
    threshold_tok_s: float
    n_servers: int
    planned_streams: int | None
    planned_code_streams: int | None
    planned_prose_streams: int | None
    spare_code_streams: int | None
    spare_prose_streams: int | None
    plan_verdict: str
    limited_by: str | None
    assumes_additive_mixing: bool
    mixing_contradicted: bool
    long_prompts_per_min: float
    long_prompt_tokens: int
    max_below_threshold_share: float
    prefill_budget_per_min: float | None
    prefill_not_measured_deployments: str | None
    prefill_verdict: str


class PlanRoutingRow(NamedTuple):
    """``marts.fct_plan_routing``: one deployment's share of the plan."""

    deployment: str
    replicas: int
    code_capacity_streams: int
    prose_capacity_streams: int
    code_streams: int
    prose_streams: int
    capacity_share_used: float
    spare_code_streams: int
    spare_prose_streams: int
    limited_by: str
    mixed_basis: str
    prefill_budget_per_min: float | None
    prefill_budget_is_unbounded: bool | None
    prefill_basis: str
    long_prompts_per_min: float
    long_prompt_routing: str


def plan(db_path: Path, run_id: str) -> PlanRow | None:
    cols = ", ".join(PlanRow._fields).replace(
        "prefill_budget_per_min", "prefill_budget_per_min::double"
    )
    rows = _mart_rows(db_path, "fct_plan", cols, "where run_id = ?", [run_id])
    return PlanRow(*rows[0]) if rows else None


def plan_routing(db_path: Path, run_id: str) -> list[PlanRoutingRow]:
    cols = ", ".join(PlanRoutingRow._fields)
    cols = cols.replace("capacity_share_used", "capacity_share_used::double", 1)
    cols = cols.replace("prefill_budget_per_min", "prefill_budget_per_min::double", 1)
    rows = _mart_rows(
        db_path, "fct_plan_routing", cols, "where run_id = ? order by deployment", [run_id]
    )
    return [PlanRoutingRow(*r) for r in rows]


class OpenLoopRow(NamedTuple):
    """``marts.fct_open_loop_capacity``: one deployment's workload under independent arrivals."""

    deployment: str
    workload: str
    burst_capacity_streams: int | None
    little_arrivals_per_s: float | None
    open_loop_arrivals_per_s: float | None
    open_loop_requests_per_min: float | None
    ratio_to_little: float | None
    mean_in_flight: float | None
    p95_in_flight: int | None
    predicted_median_tok_s: float | None
    predicted_ttft_p90_s: float | None
    mean_time_in_system_s: float | None
    users: float | None
    think_time_s: float
    limited_by: str | None
    is_extrapolated: bool | None
    not_predicted_reason: str | None


class PlanRatesRow(NamedTuple):
    """``marts.fct_plan_rates``: one deployment's share of the plan in requests a minute."""

    deployment: str
    replicas: int
    code_share: float
    code_capacity_per_min: float | None
    prose_capacity_per_min: float | None
    code_per_min: float
    prose_per_min: float
    line_share_used: float
    users: float
    think_time_s: float
    mixes_workloads: bool
    mixed_basis: str | None
    long_prompts_per_min: float | None
    not_routed_reason: str | None


def open_loop(db_path: Path, run_id: str) -> list[OpenLoopRow]:
    cols = ", ".join(OpenLoopRow._fields)
    rows = _mart_rows(
        db_path,
        "fct_open_loop_capacity",
        cols,
        "where run_id = ? order by deployment, workload",
        [run_id],
    )
    return [OpenLoopRow(*r) for r in rows]


def plan_rates(db_path: Path, run_id: str) -> list[PlanRatesRow]:
    cols = ", ".join(PlanRatesRow._fields)
    rows = _mart_rows(
        db_path, "fct_plan_rates", cols, "where run_id = ? order by deployment", [run_id]
    )
    return [PlanRatesRow(*r) for r in rows]


class ReplayPlanRow(NamedTuple):
    """``marts.fct_replay_plan``: the open-loop arrival rate of one deployment's workload."""

    deployment: str
    workload: str
    planned_streams: float
    stream_duration_s: float | None
    stream_requested_tokens: int | None
    arrivals_per_s: float | None
    long_prompts_per_min: float | None
    long_prompt_tokens: int | None
    max_below_threshold_share: float | None
    not_replayable_reason: str | None
    rate_arrivals_per_s: float | None = None
    rate_planned_streams: float | None = None


class ReplayRow(NamedTuple):
    """``marts.fct_replay``: one deployment's open-loop replay and its verdict."""

    deployment: str
    rate_factor: float
    seed: int
    planned_streams: float
    n_requests: int
    n_failed: int
    mean_streams_in_flight: float | None
    peak_streams_in_flight: int | None
    median_decode_tok_s: float | None
    share_below_threshold: float | None
    ttft_scheduled_median_s: float | None
    ttft_scheduled_p90_s: float | None
    ttft_send_p90_s: float | None
    ttft_samples: int
    ttft_p90_is_supported: bool
    max_send_lag_s: float | None
    n_sent_late: int
    n_long_prefills: int
    n_long_prefills_below: int
    prefill_below_threshold_share: float | None
    verdict: str
    verdict_text: str
    # measured beside what the open-loop model predicted for the offer (NULL: no prediction)
    code_median_decode_tok_s: float | None = None
    prose_median_decode_tok_s: float | None = None
    predicted_code_median_tok_s: float | None = None
    predicted_prose_median_tok_s: float | None = None
    predicted_mean_in_flight: float | None = None
    model_note: str | None = None
    plan_kind: str | None = None


class ReplayFleetRow(NamedTuple):
    """``marts.fct_replay_fleet``: the plan under open-loop arrivals, for the fleet."""

    replay_id: str
    rate_factor: float
    seed: int
    n_deployments: int
    n_holding: int
    failing_deployments: str | None
    plan_verdict: str


class ReplaySearchRow(NamedTuple):
    """``marts.fct_replay_search``: one deployment's lambda* bracketed by replays."""

    deployment: str
    n_steps: int
    steps: str
    highest_holding_factor: float | None
    lowest_failing_factor: float | None
    search_text: str


def replay_search(db_path: Path, run_id: str, search_id: str) -> list[ReplaySearchRow]:
    rows = _mart_rows(
        db_path,
        "fct_replay_search",
        ", ".join(ReplaySearchRow._fields),
        "where run_id = ? and search_id = ? order by deployment",
        [run_id, search_id],
    )
    return [ReplaySearchRow(*r) for r in rows]


def replay_plan(db_path: Path, run_id: str) -> list[ReplayPlanRow]:
    rows = _mart_rows(
        db_path,
        "fct_replay_plan",
        ", ".join(ReplayPlanRow._fields),
        "where run_id = ? order by deployment, workload",
        [run_id],
    )
    return [ReplayPlanRow(*r) for r in rows]


def replays(db_path: Path, run_id: str, wave_ids: Sequence[str]) -> list[ReplayRow]:
    rows = _mart_rows(
        db_path,
        "fct_replay",
        ", ".join(ReplayRow._fields),
        "where run_id = ? and list_contains(?, wave_id) order by deployment",
        [run_id, list(wave_ids)],
    )
    return [ReplayRow(*r) for r in rows]


def replay_fleet(db_path: Path, run_id: str, replay_id: str) -> ReplayFleetRow | None:
    rows = _mart_rows(
        db_path,
        "fct_replay_fleet",
        ", ".join(ReplayFleetRow._fields),
        "where run_id = ? and replay_id = ?",
        [run_id, replay_id],
    )
    return ReplayFleetRow(*rows[0]) if rows else None
