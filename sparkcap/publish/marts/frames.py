"""What a report shows, read from the dbt marts (read-only) as data frames: one run, several
runs or a night. Nothing here computes a number of record; it selects and joins."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

import pandas as pd

from sparkcap.errors import ReportError
from sparkcap.publish.marts import has_mart, latest_built_run
from sparkcap.publish.marts import runs as recorded_runs
from sparkcap.store.connection import has_table, open_warehouse


def _df(con: Any, sql: str, params: list[Any] | dict[str, Any] | None = None) -> pd.DataFrame:
    """Query → DataFrame via Arrow; DECIMAL/HUGEINT sums become floats (Vega needs JSON)."""
    import pyarrow as pa

    table = con.sql(sql, params=params or []).to_arrow_table()
    fields = [
        pa.field(f.name, pa.float64()) if pa.types.is_decimal(f.type) else f for f in table.schema
    ]
    frame: pd.DataFrame = table.cast(pa.schema(fields)).to_pandas()
    return frame


def _history(con: Any, run_id: str) -> pd.DataFrame:
    """Capacity of every night up to and including ``run_id``'s (never a later one), each
    beside the previous night's, as ``marts.rpt_capacity_history`` has it, and beside the
    baseline band and change flag ``marts.fct_changes`` gives its capacity."""
    changes = has_mart(con, "fct_changes")
    band = (
        ", c.baseline_low as baseline_low_streams, c.baseline_high as baseline_high_streams, "
        "coalesce(c.is_change, false) as is_change"
        if changes
        else ", null as baseline_low_streams, null as baseline_high_streams, false as is_change"
    )
    join = (
        "left join marts.fct_changes c on c.run_id = h.run_id and c.deployment = h.deployment "
        "and c.workload = h.workload and c.subject = 'capacity' "
        if changes
        else ""
    )
    return _df(
        con,
        "select h.run_id, h.started_at, h.deployment, h.workload, h.method, h.capacity_streams, "
        f"h.previous_capacity_streams, h.previous_method, h.capacity_change{band} "
        f"from marts.rpt_capacity_history h {join}"
        "where h.started_at <= (select started_at from raw.runs where run_id = ?) "
        "order by h.started_at, h.run_id",
        [run_id],
    )


def _nightly(con: Any, data: dict[str, Any], where: str, params: dict[str, Any]) -> None:
    """Issue 27's sections, each read as its mart has it: the capacity tiers (rows: pair ×
    TTFT ceiling, columns: threshold), the flagged changes, energy at the capacity point."""
    data["tiers"] = pd.DataFrame()
    data["tier_columns"] = {}
    if has_mart(con, "fct_capacity_tiers"):
        t = _df(
            con,
            "select deployment, workload, threshold_tok_s::double as threshold_tok_s, "
            "ttft_p90_ceiling_s::double as ceiling_s, case when not is_measured then "
            "'not measured' when is_lower_bound then '≥ ' || capacity_streams "
            "else capacity_streams::varchar end as cell from marts.fct_capacity_tiers "
            f"{where} order by deployment, workload, ceiling_s nulls first, threshold_tok_s",
            params,
        )
        if not t.empty:
            t["ttft"] = t["ceiling_s"].map(
                lambda c: "no TTFT ceiling" if pd.isna(c) else f"TTFT p90 ≤ {c:g} s"
            )
            t["column"] = t["threshold_tok_s"].map(lambda x: f"{x:g} tok/s")
            order = list(dict.fromkeys(t.sort_values("threshold_tok_s")["column"]))
            wide = t.pivot_table(
                index=["deployment", "workload", "ttft"],
                columns="column",
                values="cell",
                aggfunc="first",
                sort=False,
            ).reset_index()
            data["tiers"] = wide[["deployment", "workload", "ttft", *order]]
            data["tier_columns"] = {
                "deployment": "deployment",
                "workload": "workload",
                "ttft": "TTFT",
                **{c: c for c in order},
            }
    data["flagged_changes"] = (
        _df(
            con,
            "select deployment, workload, subject, concurrency, round(change_pct, 1) "
            "as change_pct, p_value, what_else_changed, verdict from marts.fct_changes "
            f"{where} and is_change order by deployment, workload, subject, concurrency",
            params,
        )
        if has_mart(con, "fct_changes")
        else pd.DataFrame()
    )
    data["energy"] = (
        _df(
            con,
            "select deployment, workload, capacity_streams, round(tokens_per_joule, 3) as "
            "tokens_per_joule, round(streams_per_kw, 1) as streams_per_kw, "
            # the range the power readings' timing allows (a read's round trip): stated,
            # so a loaded client's lopsided reads never pass for a precise figure
            "case when status <> 'measured' then null "
            "when streams_per_kw_low is null and streams_per_kw_high is null "
            "then 'not kept' when streams_per_kw_low is null "
            "then '≤ ' || round(streams_per_kw_high, 1)::varchar "
            "else round(streams_per_kw_low, 1)::varchar || '–' "
            "|| round(streams_per_kw_high, 1)::varchar end as streams_per_kw_range, status, "
            f"unavailable_reason from marts.fct_energy_at_capacity {where} "
            "order by deployment, workload",
            params,
        )
        if has_mart(con, "fct_energy_at_capacity")
        else pd.DataFrame()
    )


def _plan(con: Any, data: dict[str, Any], run_id: str) -> None:
    """The night's plan as its build made it (the project's default mix and long prompts,
    or the last ``sparkcap plan``'s): fct_plan's words and fct_plan_routing's table. A
    combined report has no one plan: the plan is of one night's fleet."""
    data["plan_routing"], data["plan_rates"] = pd.DataFrame(), pd.DataFrame()
    if not (has_mart(con, "fct_plan") and has_mart(con, "fct_plan_routing")):
        return
    planned = con.execute(
        "select count(*) from marts.fct_plan where run_id = ?", [run_id]
    ).fetchall()[0][0]
    if not planned:
        return
    data["plan_routing"] = _df(
        con,
        "select deployment, replicas, code_streams, prose_streams, "
        "round(capacity_share_used * 100) as used_pct, spare_code_streams, spare_prose_streams, "
        "case when prefill_budget_is_unbounded then 'any' else "
        "coalesce(round(prefill_budget_per_min, 2)::varchar, 'not measured') end as budget, "
        "round(long_prompts_per_min, 2) as long_per_min, "
        "limited_by, mixed_basis, prefill_basis, long_prompt_routing from marts.fct_plan_routing "
        "where run_id = $run order by deployment",
        {"run": run_id},
    )
    if has_mart(con, "fct_plan_rates"):
        data["plan_rates"] = _df(
            con,
            "select deployment, replicas, round(code_per_min, 1) as code_per_min, "
            "round(prose_per_min, 1) as prose_per_min, "
            "round(code_capacity_per_min, 1) as code_capacity_per_min, "
            "round(prose_capacity_per_min, 1) as prose_capacity_per_min, "
            "cast(round(line_share_used * 100) as integer) as line_pct, "
            "cast(round(users) as integer) as users, "
            "coalesce(mixed_basis, '—') as mixed_basis from marts.fct_plan_rates "
            "where run_id = $run order by deployment",
            {"run": run_id},
        )


REPLAY_MARTS = ("fct_replay", "fct_replay_fleet", "fct_replay_concurrency")


def _open_loop(con: Any, data: dict[str, Any], run_id: str) -> None:
    """The open-loop model's curve per deployment and workload (predicted median stream rate
    against requests a minute, fct_open_loop_curve), each lambda* (fct_open_loop_capacity),
    and the night's replays measured on it: a workload's measured median at the rate its
    offer amounts to on that workload's curve (the offer's share of the deployment's open-loop
    line times lambda*, where the prediction was read, int_replay_predictions)."""
    for key in ("open_loop_curve", "open_loop_capacity", "open_loop_replays"):
        data[key] = pd.DataFrame()
    if not all(has_mart(con, m) for m in ("fct_open_loop_curve", "fct_open_loop_capacity")):
        return
    run = {"run": run_id}
    data["open_loop_curve"] = _df(
        con,
        "select deployment, workload, requests_per_min, predicted_median_tok_s "
        "from marts.fct_open_loop_curve where run_id = $run and is_stable "
        "order by deployment, workload, requests_per_min",
        run,
    )
    data["open_loop_capacity"] = _df(
        con,
        "select deployment, workload, open_loop_requests_per_min, "
        "round(ratio_to_little, 2) as ratio_to_little, burst_capacity_streams "
        "from marts.fct_open_loop_capacity where run_id = $run "
        "and open_loop_requests_per_min is not null order by deployment, workload",
        run,
    )
    if has_mart(con, "fct_replay"):
        data["open_loop_replays"] = _df(
            con,
            "select r.deployment, w.workload, r.rate_factor, "
            "r.predicted_line_share * c.open_loop_requests_per_min as requests_per_min, "
            "case w.workload when 'code' then r.code_median_decode_tok_s "
            "else r.prose_median_decode_tok_s end as measured_median_tok_s, r.verdict "
            "from marts.fct_replay as r "
            "cross join (values ('code'), ('prose')) as w(workload) "
            "inner join marts.fct_open_loop_capacity as c on c.run_id = r.run_id "
            "and c.deployment = r.deployment and c.workload = w.workload "
            "where r.run_id = $run and r.predicted_line_share is not null "
            "and (case w.workload when 'code' then r.code_median_decode_tok_s "
            "else r.prose_median_decode_tok_s end) is not null",
            run,
        )


def _replay(con: Any, data: dict[str, Any], run_id: str) -> None:
    """The night's open-loop replays (``sparkcap replay`` runs after a night and keeps its
    replays with it; render the report again to show them): the fleet's verdict per replay,
    each deployment's, and the streams in flight second by second. ``ttft_p90_is_supported``
    says whether enough samples support the TTFT p90 (dbt macro tail_min_samples)."""
    for key in ("replay_fleet", "replays", "replay_concurrency"):
        data[key] = pd.DataFrame()
    if not all(has_mart(con, m) for m in REPLAY_MARTS):
        return
    run = {"run": run_id}
    data["replay_fleet"] = _df(
        con,
        "select rate_factor, seed, n_holding || ' of ' || n_deployments as holding, "
        "plan_verdict from marts.fct_replay_fleet where run_id = $run "
        "order by started_at, rate_factor, seed",
        run,
    )
    data["replays"] = _df(
        con,
        "select rate_factor, seed, deployment, round(planned_streams * rate_factor, 1) as "
        "offered_streams, round(mean_streams_in_flight, 1) as in_flight, "
        "peak_streams_in_flight as peak, n_requests, n_failed, "
        "round(median_decode_tok_s, 1) as median_tok_s, "
        "round(ttft_scheduled_median_s, 2) as ttft_scheduled_median_s, "
        "ttft_p90_is_supported, round(ttft_scheduled_p90_s, 2) as ttft_scheduled_p90_s, "
        "ttft_samples, ttft_min_samples, "
        "case when n_long_prefills = 0 then '—' else round(100 * "
        "prefill_below_threshold_share, 1) || ' % (' || n_long_prefills_below || ' of ' || "
        "n_long_prefills || ')' end as prefill_below, "
        "n_sent_late, verdict_text from marts.fct_replay where run_id = $run "
        "order by rate_factor, seed, deployment",
        run,
    )
    data["replay_concurrency"] = _df(
        con,
        "select c.deployment, c.rate_factor, r.seed, c.t_s, c.streams_in_flight, "
        "r.planned_streams * r.rate_factor as offered_streams, r.verdict "
        "from marts.fct_replay_concurrency c join marts.fct_replay r "
        "using (run_id, wave_id, deployment) where c.run_id = $run "
        "order by c.rate_factor, r.seed, c.deployment, c.t_s",
        run,
    )


def _search_path(con: Any, which: str, params: dict[str, Any]) -> pd.DataFrame:
    """``marts.fct_search_path`` rows of the report's runs (none for a grid night, or a
    warehouse built before searches existed)."""
    if not has_mart(con, "fct_search_path"):
        return pd.DataFrame()
    return _df(
        con,
        f"select s.* from marts.fct_search_path s {which} "
        "order by s.deployment, s.workload, s.search_step",
        params,
    )


def _why(con: Any, data: dict[str, Any], where: str, params: dict[str, Any]) -> None:
    """ "Why this capacity": fct_bottlenecks' verdicts and fct_level_bounds' curve beside the
    measured one (empty for a warehouse built before them: the section is then left out)."""
    if not has_mart(con, "fct_bottlenecks"):
        data["bottlenecks"] = data["bounds"] = pd.DataFrame()
        return
    data["bottlenecks"] = _df(
        con,
        "select deployment, workload, capacity_streams, limit_level, bottleneck, confidence, "
        "evidence, advice, round(100 * limit_level_share_of_bound, 1) as share_of_bound_pct, "
        "bound_capacity_streams, bound_flags, overruled_evidence "
        f"from marts.fct_bottlenecks {where} "
        "order by deployment, workload",
        params,
    )
    data["bounds"] = _df(
        con,
        "select deployment, workload, concurrency, median_decode_tok_s, bound_decode_tok_s, "
        f"share_of_bound, threshold_tok_s from marts.fct_level_bounds {where} "
        "order by deployment, workload, concurrency",
        params,
    )


def runs_of_night(db_path: Path, night: date) -> list[str]:
    """Built runs that started on ``night`` (a UTC date), oldest first."""
    with open_warehouse(db_path, read_only=True) as con:
        rows = con.execute(
            "select distinct c.run_id, r.started_at from marts.fct_capacity c "
            "join raw.runs r using (run_id) "
            "where cast(timezone('UTC', r.started_at) as date) = ? order by r.started_at",
            [night],
        ).fetchall()
    if not rows:
        raise ReportError(f"no built run started on {night.isoformat()} (UTC)")
    return [str(r[0]) for r in rows]


def load_combined(db_path: Path, run_ids: Sequence[str], label: str) -> dict[str, Any]:
    """Data for one report over several runs: hand-made sweeps read as one night.

    Each deployment x workload comes from the newest of the runs that measured it, and the
    fleet headline from ``marts.fleet_capacity_of`` (the fleet formula of
    ``fct_fleet_capacity``, created by every build); nothing is computed here.
    """
    runs = list(dict.fromkeys(run_ids))
    with open_warehouse(db_path, read_only=True) as con:
        found = recorded_runs(con, runs)
        missing = sorted(set(runs) - {r.run_id for r in found})
        if missing:
            raise ReportError(f"no run {', '.join(missing)} in {db_path}")
        has_macro = con.execute(
            "select count(*) from duckdb_functions() where schema_name = 'marts' "
            "and function_name = 'fleet_capacity_of'"
        ).fetchall()[0][0]
        if not has_macro:
            raise ReportError(
                "this warehouse was built by an older sparkcap: run `sparkcap build` once to "
                "report over several runs"
            )
        p = {"runs": runs}
        data: dict[str, Any] = {"run_id": label, "runs": found}
        newest = found[-1]
        data["run"] = (
            label,
            found[0][1],
            newest[2],
            "combined",
            f"{len(found)} runs: " + ", ".join(str(r[0]) for r in found),
            newest[5],
        )
        data["capacity"] = _df(
            con,
            "select r.* from marts.rpt_capacity r join marts.capacity_of($runs) c "
            "using (run_id, deployment, workload) order by deployment, workload",
            p,
        )
        if data["capacity"].empty:
            raise ReportError("none of these runs has capacity rows (run `sparkcap build`)")
        data["fleet"] = _df(
            con, "select * from marts.fleet_capacity_of($runs) order by workload", p
        )
        data["levels"] = _df(
            con,
            "select l.*, c.capacity_streams from marts.fct_levels l "
            "join marts.capacity_of($runs) c using (run_id, deployment, workload) "
            "order by deployment, workload, concurrency",
            p,
        )
        data["gaps"] = _df(
            con,
            "select deployment, step, outcome, reason from marts.fct_step_outcomes "
            "where list_contains($runs, run_id) and is_failed and (deployment is null or "
            "deployment not in (select deployment from marts.capacity_of($runs))) "
            "order by deployment, step",
            p,
        )
        data["metrics_missing"] = _df(
            con,
            "select t.deployment, count(*) filter (where t.metrics_error is not null) "
            "as n_missing, count(*) as n_waves, min(t.metrics_error) as example_error "
            "from marts.fct_trials t join marts.capacity_of($runs) c "
            "using (run_id, deployment, workload) group by t.deployment "
            "having count(t.metrics_error) > 0 order by t.deployment",
            p,
        )
        data["invalid"] = _df(
            con,
            "select t.deployment, t.workload, t.concurrency, t.trial, t.invalid_reasons "
            "from marts.fct_trials t join marts.capacity_of($runs) c "
            "using (run_id, deployment, workload) where t.trial > 0 and not t.is_valid "
            "order by t.deployment, t.workload, t.concurrency, t.trial",
            p,
        )
        data["search_path"] = _search_path(
            con,
            "join marts.capacity_of($runs) c using (run_id, deployment, workload)",
            p,
        )
        data["history"] = _history(con, str(newest[0]))
        of_runs = (
            "where (run_id, deployment, workload) in (select (run_id, deployment, workload) "
            "from marts.capacity_of($runs))"
        )
        _why(con, data, of_runs, p)
        _nightly(con, data, of_runs, p)
        if has_mart(con, "fct_session_turns"):
            # each deployment's sessions from the run its agent capacity came from
            of_agent_runs = (
                "join marts.capacity_of($runs) c on c.run_id = s.run_id "
                "and c.deployment = s.deployment and c.workload = 'agent'"
            )
            data["session_turns"] = _df(
                con,
                f"select s.* from marts.fct_session_turns s {of_agent_runs} "
                "order by s.deployment, s.concurrent_sessions, s.turn_index",
                p,
            )
            data["session_cache"] = _df(
                con,
                "select s.deployment, s.concurrent_sessions, s.trial, s.cache_state, "
                "s.cache_hit_share, s.reset_verdict, s.is_flagged, s.flag_reason "
                f"from marts.fct_session_cache s {of_agent_runs} "
                "order by s.deployment, s.concurrent_sessions, s.trial, s.attempt",
                p,
            )
        # probes (the ladder among them) measure a deployment, not a sweep: a report over
        # several runs shows its runs' sweeps only
        for key in ("prefill", "cache", "timeline", "output_length", "mixed", "links", "dq"):
            data[key] = pd.DataFrame()
        data["previous_run"] = None
    return data


def load_data(db_path: Path, run_id: str | None) -> dict[str, Any]:
    run_id = run_id or latest_built_run(db_path)
    with open_warehouse(db_path, read_only=True) as con:
        run = recorded_runs(con, [run_id])
        if not run:
            raise ReportError(f"no run {run_id} in {db_path}")
        data: dict[str, Any] = {"run_id": run_id, "run": run[0]}
        data["capacity"] = _df(
            con,
            "select * from marts.rpt_capacity where run_id = ? order by deployment, workload",
            [run_id],
        )
        if data["capacity"].empty:
            kinds = con.execute(
                "select count(*) filter (where probe is null), count(*) from raw.waves "
                "where run_id = ?",
                [run_id],
            ).fetchall()[0]
            if kinds[1] > 0 and kinds[0] == 0:
                raise ReportError(
                    f"run {run_id} only holds probes, no sweep: the report of the next sweep "
                    "run shows them (or query marts.fct_prefill_interference / fct_prompt_cache)"
                )
            raise ReportError(f"run {run_id} has no capacity rows (run `sparkcap build`)")
        data["fleet"] = _df(
            con,
            "select * from marts.fct_fleet_capacity where run_id = ? order by workload",
            [run_id],
        )
        data["levels"] = _df(
            con,
            "select l.*, c.capacity_streams from marts.fct_levels l join marts.fct_capacity c "
            "using (run_id, deployment, workload) where l.run_id = ? "
            "order by deployment, workload, concurrency",
            [run_id],
        )
        data["gaps"] = _df(
            con,
            "select deployment, step, outcome, reason from marts.fct_step_outcomes "
            "where run_id = ? and is_failed order by deployment, step",
            [run_id],
        )
        data["metrics_missing"] = _df(
            con,
            "select deployment, count(*) filter (where metrics_error is not null) as n_missing, "
            "count(*) as n_waves, min(metrics_error) as example_error from marts.fct_trials "
            "where run_id = ? group by deployment having count(metrics_error) > 0 "
            "order by deployment",
            [run_id],
        )
        data["invalid"] = _df(
            con,
            "select deployment, workload, concurrency, trial, invalid_reasons "
            "from marts.fct_trials where run_id = ? and trial > 0 and not is_valid "
            "order by deployment, workload, concurrency, trial",
            [run_id],
        )
        if has_mart(con, "fct_session_turns"):  # a warehouse built before 0.7 lacks them
            data["session_turns"] = _df(
                con,
                "select * from marts.fct_session_turns where run_id = ? "
                "order by deployment, concurrent_sessions, turn_index",
                [run_id],
            )
            data["session_cache"] = _df(
                con,
                "select deployment, concurrent_sessions, trial, cache_state, cache_hit_share, "
                "reset_verdict, is_flagged, flag_reason from marts.fct_session_cache "
                "where run_id = ? order by deployment, concurrent_sessions, trial, attempt",
                [run_id],
            )
        data["search_path"] = _search_path(con, "where s.run_id = $run", {"run": run_id})
        data["history"] = _history(con, run_id)
        _why(con, data, "where run_id = $run", {"run": run_id})
        _nightly(con, data, "where run_id = $run", {"run": run_id})
        _plan(con, data, run_id)
        _open_loop(con, data, run_id)
        _replay(con, data, run_id)
        has_probes = has_mart(con, "fct_prefill_interference")
        # Probes are the newest of each deployment measured no later than the reported run:
        # a report of an older night must not show a later night's probes.
        as_of = "r.started_at <= (select started_at from raw.runs where run_id = $run_id)"

        def newest(table: str, order: str, rank: str = "row_number") -> pd.DataFrame:
            if not has_probes:
                return pd.DataFrame()
            return _df(
                con,
                f"select p.*, r.started_at from marts.{table} p join raw.runs r using (run_id) "
                f"where {as_of} qualify {rank}() over (partition by p.deployment "
                f"order by r.started_at desc) = 1 order by {order}",
                {"run_id": run_id},
            )

        data["prefill"] = newest("fct_prefill_interference", "p.deployment")
        data["cache"] = newest("fct_prompt_cache", "p.deployment")
        if has_mart(con, "fct_context_ladder_summary"):  # a warehouse built before lacks it
            data["ladder"] = newest("fct_context_ladder_summary", "p.deployment")
            data["ladder_rungs"] = newest(
                "fct_context_ladder", "p.deployment, p.rung_tokens", rank="dense_rank"
            )
        data["timeline"] = (
            _df(
                con,
                "select * from marts.fct_probe_timeline where list_contains($waves, wave_id)",
                {"waves": [str(w) for w in data["prefill"]["wave_id"]]},
            )
            if not data["prefill"].empty
            else pd.DataFrame()
        )
        # all waves of the newest run that has these probes (several lengths / trials)
        data["output_length"] = newest(
            "fct_output_length", "p.deployment, p.requested_tokens", rank="dense_rank"
        )
        data["mixed"] = newest("fct_mixed_load", "p.deployment, p.stream_workload", "dense_rank")
        data["links"] = (
            _df(
                con,
                "select deployment, link, node_a, node_b, nominal_gbps, achieved_gbps, "
                "share_of_nominal, healthy, error from marts.fct_link_health "
                "where run_id = ? order by deployment, link",
                [run_id],
            )
            if has_probes
            else pd.DataFrame()
        )
        prev = con.execute(
            "select c.run_id from marts.fct_capacity c join raw.runs r using (run_id) "
            "where r.started_at < (select started_at from raw.runs where run_id = ?) "
            "order by r.started_at desc limit 1",
            [run_id],
        ).fetchall()
        data["previous_run"] = str(prev[0][0]) if prev else None
        has_dq = has_table(con, "raw", "dq_results")
        data["dq"] = (
            _df(
                con,
                "select suite, expectation, blocking, success, unexpected_count "
                "from raw.dq_results where run_id = ? and wave_id is null "
                "and deployment is null order by blocking desc, suite, expectation",
                [run_id],
            )
            if has_dq
            else pd.DataFrame()
        )
    return data
