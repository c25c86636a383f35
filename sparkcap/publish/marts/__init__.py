"""Typed readers of the marts: what the CLI, the report, ``compare`` and the Prefect artifact
print is read here, once, from the models dbt built (read-only).

Each reader returns rows whose fields are the mart's columns, units in their names, as Python
types (a DuckDB ``DECIMAL`` threshold is a float, so it prints ``20``, never ``20.0``); the
words a person reads are made from them in :mod:`sparkcap.publish.text`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

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


RowT = TypeVar("RowT", bound=NamedTuple)


def has_mart(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether dbt has built ``marts.<name>``: a warehouse built by an older sparkcap, or
    whose build stopped part-way, lacks the newer marts, and their readers then read none."""
    return warehouse.has_table(con, "marts", name)


def _read(
    db_path: Path,
    row: type[RowT],
    mart: str,
    run_id: str,
    rest: str,
    *,
    params: Sequence[Any] = (),
    doubles: Sequence[str] = (),
    columns: Mapping[str, str] | None = None,
    if_built: bool = True,
) -> list[RowT]:
    """A run's rows of ``marts.<mart>`` as ``row``s, one column per field in the field's
    order: a field in ``doubles`` read as a DOUBLE (a DuckDB ``DECIMAL`` would be a
    ``Decimal``), a field in ``columns`` from the column named there. ``rest`` follows ``where
    run_id = ?`` (more conditions, the order) and ``params`` the run's id. ``if_built``: none
    where dbt has not built the mart (:func:`has_mart`); the marts every build makes are read
    without asking, so a warehouse without them fails."""
    names = [(columns or {}).get(f, f) for f in row._fields]
    select = ", ".join(f"{n}::double" if n in doubles else n for n in names)
    with warehouse.open_warehouse(db_path, read_only=True) as con:
        if if_built and not has_mart(con, mart):
            return []
        sql = f"select {select} from marts.{mart} where run_id = ? {rest}"
        rows = con.execute(sql, [run_id, *params]).fetchall()
    return [row(*r) for r in rows]


def _run_reader(
    row: type[RowT],
    mart: str,
    order: str,
    *,
    where: str = "",
    doubles: Sequence[str] = (),
    columns: Mapping[str, str] | None = None,
    if_built: bool = True,
) -> Callable[[Path, str], list[RowT]]:
    """The reader of a run's rows of ``marts.<mart>`` (:func:`_read`): those that also meet
    ``where``, in ``order``."""
    rest = f"{f'and {where} ' if where else ''}order by {order}"

    def read(db_path: Path, run_id: str) -> list[RowT]:
        return _read(
            db_path, row, mart, run_id, rest, doubles=doubles, columns=columns, if_built=if_built
        )

    return read


levels = _run_reader(LevelRow, "fct_levels", "deployment, workload, concurrency", if_built=False)

capacities = _run_reader(
    CapacityRow,
    "fct_capacity",
    "deployment, workload",
    doubles=["threshold_tok_s"],
    columns={"capacity_interpolated_streams": "capacity_interpolated"},
    if_built=False,
)

fleet_capacities = _run_reader(
    FleetRow, "fct_fleet_capacity", "workload", doubles=["threshold_tok_s"]
)

bottlenecks = _run_reader(BottleneckRow, "fct_bottlenecks", "deployment, workload")

# Every agent wave's cache verdict (none from a warehouse built before 0.7).
session_caches = _run_reader(
    SessionCacheRow, "fct_session_cache", "deployment, concurrent_sessions, trial, attempt"
)

level_bounds = _run_reader(
    LevelBoundRow,
    "fct_level_bounds",
    "deployment, workload, concurrency",
    doubles=["threshold_tok_s"],
    if_built=False,
)


def changes(db_path: Path, run_id: str, *, flagged_only: bool = False) -> list[ChangeRow]:
    """The night's comparisons with its baseline (``flagged_only``: dbt's flagged changes);
    none before ``fct_changes`` is built."""
    flagged = "and is_change " if flagged_only else ""
    return _read(
        db_path,
        ChangeRow,
        "fct_changes",
        run_id,
        f"{flagged}order by deployment, workload, subject, concurrency",
    )


capacity_tiers = _run_reader(
    TierRow,
    "fct_capacity_tiers",
    "deployment, workload, threshold_tok_s, ttft_p90_ceiling_s nulls last",
    doubles=["threshold_tok_s", "ttft_p90_ceiling_s"],
)

energy_at_capacity = _run_reader(
    EnergyAtCapacityRow, "fct_energy_at_capacity", "deployment, workload"
)


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


search_disagreements = _run_reader(
    SearchDisagreement,
    "fct_search_path",
    "deployment, workload, search_step",
    where="not live_agrees",
    if_built=False,
)

failed_steps = _run_reader(
    FailedStep, "fct_step_outcomes", "deployment, step", where="is_failed", if_built=False
)

link_health = _run_reader(LinkRow, "fct_link_health", "deployment, link", if_built=False)


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


context_ladders = _run_reader(ContextLadderRow, "fct_context_ladder_summary", "deployment, wave_id")


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
    rows = _read(db_path, PlanRow, "fct_plan", run_id, "", doubles=["prefill_budget_per_min"])
    return rows[0] if rows else None


plan_routing = _run_reader(
    PlanRoutingRow,
    "fct_plan_routing",
    "deployment",
    doubles=["capacity_share_used", "prefill_budget_per_min"],
)


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


plan_rates = _run_reader(PlanRatesRow, "fct_plan_rates", "deployment")


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
    return _read(
        db_path,
        ReplaySearchRow,
        "fct_replay_search",
        run_id,
        "and search_id = ? order by deployment",
        params=[search_id],
    )


replay_plan = _run_reader(ReplayPlanRow, "fct_replay_plan", "deployment, workload")


def replays(db_path: Path, run_id: str, wave_ids: Sequence[str]) -> list[ReplayRow]:
    return _read(
        db_path,
        ReplayRow,
        "fct_replay",
        run_id,
        "and list_contains(?, wave_id) order by deployment",
        params=[list(wave_ids)],
    )


def replay_fleet(db_path: Path, run_id: str, replay_id: str) -> ReplayFleetRow | None:
    rows = _read(
        db_path, ReplayFleetRow, "fct_replay_fleet", run_id, "and replay_id = ?", params=[replay_id]
    )
    return rows[0] if rows else None
