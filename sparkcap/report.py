"""The published report: one self-contained HTML page per run, plus PNG and SVG of each chart.

Every number and chart comes from the dbt marts (read-only), never from in-memory sweep data,
so the report shows exactly what ad-hoc SQL users can query. Vega is inlined (vl-convert's
bundle) so the page opens offline; charts are also exported with vl-convert for publishing.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd

from sparkcap import __version__
from sparkcap.settings import get_settings
from sparkcap.warehouse import open_warehouse

WORKLOAD_COLORS = {"code": "#1f77b4", "prose": "#e45756"}


@dataclass
class ReportResult:
    run_id: str
    index: Path
    latest: Path | None
    charts: list[Path] = field(default_factory=list)
    headline: dict[str, int] = field(default_factory=dict)


class ReportError(RuntimeError):
    """The marts hold nothing to report for the requested run."""


def _df(con: Any, sql: str, params: list[Any] | dict[str, Any] | None = None) -> pd.DataFrame:
    """Query → DataFrame via Arrow; DECIMAL/HUGEINT sums become floats (Vega needs JSON)."""
    import pyarrow as pa

    table = con.sql(sql, params=params or []).to_arrow_table()
    fields = [
        pa.field(f.name, pa.float64()) if pa.types.is_decimal(f.type) else f for f in table.schema
    ]
    frame: pd.DataFrame = table.cast(pa.schema(fields)).to_pandas()
    return frame


def _latest_built_run(con: Any) -> str:
    rows = con.execute(
        "select c.run_id from marts.fct_capacity c join raw.runs r using (run_id) "
        "order by r.started_at desc limit 1"
    ).fetchall()
    if not rows:
        raise ReportError("no capacity results in the marts yet (run `sparkcap build` first)")
    return str(rows[0][0])


def _history(con: Any, run_id: str) -> pd.DataFrame:
    """Capacity of every night up to and including ``run_id``'s (never a later one), each
    beside the previous night's, as ``marts.rpt_capacity_history`` has it."""
    return _df(
        con,
        "select run_id, started_at, deployment, workload, capacity_streams, "
        "previous_capacity_streams, capacity_change from marts.rpt_capacity_history "
        "where started_at <= (select started_at from raw.runs where run_id = ?) "
        "order by started_at, run_id",
        [run_id],
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


def combined_label(run_ids: Sequence[str], night: date | None = None) -> str:
    """A folder name for a report over several runs: the night, or a digest of the runs."""
    if night is not None:
        return f"night-{night.isoformat()}"
    digest = hashlib.sha256("\n".join(sorted(run_ids)).encode()).hexdigest()[:8]
    return f"combined-{len(run_ids)}-runs-{digest}"


def load_combined(db_path: Path, run_ids: Sequence[str], label: str) -> dict[str, Any]:
    """Data for one report over several runs: hand-made sweeps read as one night.

    Each deployment x workload comes from the newest of the runs that measured it, and the
    fleet headline from ``marts.fleet_capacity_of`` (the fleet formula of
    ``fct_fleet_capacity``, created by every build); nothing is computed here.
    """
    runs = list(dict.fromkeys(run_ids))
    with open_warehouse(db_path, read_only=True) as con:
        found = con.execute(
            "select run_id, started_at, finished_at, status, status_reason, sparkcap_version "
            "from raw.runs where list_contains(?, run_id) order by started_at",
            [runs],
        ).fetchall()
        missing = sorted(set(runs) - {str(r[0]) for r in found})
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
            "select c.*, coalesce(d.replicas, 1) as replicas, d.nodes, d.hardware, d.model "
            "as model_name from marts.capacity_of($runs) c left join marts.dim_deployments d "
            "using (run_id, deployment) order by deployment, workload",
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
        data["history"] = _history(con, str(newest[0]))
        for key in ("prefill", "cache", "timeline", "output_length", "mixed", "links", "dq"):
            data[key] = pd.DataFrame()
        data["previous_run"] = None
    return data


def load_data(db_path: Path, run_id: str | None) -> dict[str, Any]:
    with open_warehouse(db_path, read_only=True) as con:
        run_id = run_id or _latest_built_run(con)
        run = con.execute(
            "select run_id, started_at, finished_at, status, status_reason, sparkcap_version "
            "from raw.runs where run_id = ?",
            [run_id],
        ).fetchall()
        if not run:
            raise ReportError(f"no run {run_id} in {db_path}")
        data: dict[str, Any] = {"run_id": run_id, "run": run[0]}
        data["capacity"] = _df(
            con,
            "select c.*, coalesce(d.replicas, 1) as replicas, d.nodes, d.hardware, d.model "
            "as model_name from marts.fct_capacity c left join marts.dim_deployments d "
            "using (run_id, deployment) where c.run_id = ? order by deployment, workload",
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
        data["history"] = _history(con, run_id)
        has_probes = con.execute(
            "select count(*) from information_schema.tables "
            "where table_schema = 'marts' and table_name = 'fct_prefill_interference'"
        ).fetchall()[0][0]
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
        has_dq = con.execute(
            "select count(*) from information_schema.tables "
            "where table_schema = 'raw' and table_name = 'dq_results'"
        ).fetchall()[0][0]
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


def _threshold(data: dict[str, Any]) -> float:
    return float(data["capacity"]["threshold_tok_s"].iloc[0])


def _concurrency_axis(frame: pd.DataFrame) -> Any:
    """Concurrency levels double (1, 2, 4, ...): a log-2 axis spaces them evenly. Ticks sit at
    the tested levels only: Vega's own ticks on a short log range read 1.2, 1.6, 2.2, and on a
    long one name levels nobody tested."""
    levels = sorted({int(x) for x in frame["concurrency"].dropna()})
    return alt.X(
        "concurrency:Q",
        title="concurrent streams",
        scale=alt.Scale(type="log", base=2, domain=[levels[0], levels[-1]])
        if levels
        else alt.Scale(type="log", base=2),
        axis=alt.Axis(values=levels, format="d", grid=True),
    )


def _workload_color(frame: pd.DataFrame) -> Any:
    """One colour per workload, the same in every chart; the legend lists the measured ones."""
    measured = [w for w in WORKLOAD_COLORS if w in set(frame["workload"])]
    others = sorted(set(frame["workload"]) - set(WORKLOAD_COLORS))
    domain = measured + others
    return alt.Color(
        "workload:N",
        scale=alt.Scale(domain=domain, range=[WORKLOAD_COLORS.get(w, "#7f7f7f") for w in domain]),
        legend=alt.Legend(symbolOpacity=1),
    )


def headline_chart(data: dict[str, Any]) -> Any:
    cap = data["capacity"].copy()
    cap["streams"] = cap["capacity_streams"] * cap["replicas"]
    cap["label"] = cap.apply(
        lambda r: (
            f"{r['deployment']} ×{r['replicas']} (extrapolated)"
            if r["replicas"] > 1
            else r["deployment"]
        ),
        axis=1,
    )
    totals = cap.groupby("workload", as_index=False)["streams"].sum()
    t = _threshold(data)
    bars = (
        alt.Chart(cap)
        .mark_bar()
        .encode(
            y=alt.Y("workload:N", title=None, sort=["code", "prose"]),
            # room to the right of the longest bar for its bold total
            x=alt.X(
                "streams:Q",
                title=f"concurrent streams with median ≥ {t:g} tok/s",
                scale=alt.Scale(domain=[0, max(1.0, float(totals["streams"].max()) * 1.12)]),
            ),
            color=alt.Color("label:N", title="deployment", legend=alt.Legend(labelLimit=0)),
            opacity=alt.condition("datum.replicas > 1", alt.value(0.65), alt.value(1.0)),
            order=alt.Order("deployment:O"),
            tooltip=["deployment", "workload", "capacity_streams", "replicas", "streams"],
        )
    )
    text = (
        alt.Chart(totals)
        .mark_text(align="left", dx=6, fontWeight="bold", fontSize=14)
        .encode(
            y=alt.Y("workload:N", sort=["code", "prose"]),
            x="streams:Q",
            text=alt.Text("streams:Q", format="d"),
        )
    )
    summary = ", ".join(f"≈ {int(r.streams)} {r.workload}" for r in totals.itertuples())
    return (bars + text).properties(
        width=640,
        height=120,
        title=alt.TitleParams(
            f"Fleet capacity at {t:g} tok/s: {summary} streams",
            subtitle="Alternative workloads, not a mixed load. Faded segments count a measured "
            "replica once per identical replica.",
        ),
    )


def rate_chart(data: dict[str, Any]) -> Any:
    lv = data["levels"].copy()
    lv["is_capacity"] = lv["concurrency"] == lv["capacity_streams"]
    t = _threshold(data)
    base = alt.Chart(lv).encode(
        x=_concurrency_axis(lv),
        color=_workload_color(lv),
    )
    band = base.mark_area(opacity=0.15).encode(
        y=alt.Y("min_decode_tok_s:Q", title="decode rate per stream (tok/s)"),
        y2="max_decode_tok_s:Q",
    )
    ci = base.mark_area(opacity=0.3).encode(y="ci_low_tok_s:Q", y2="ci_high_tok_s:Q")
    line = base.mark_line(point=True).encode(
        y="median_decode_tok_s:Q",
        tooltip=[
            "workload",
            "concurrency",
            alt.Tooltip("median_decode_tok_s:Q", format=".1f"),
            alt.Tooltip("min_decode_tok_s:Q", format=".1f"),
            alt.Tooltip("ci_low_tok_s:Q", format=".1f"),
            alt.Tooltip("ci_high_tok_s:Q", format=".1f"),
            "n_valid_trials",
        ],
    )
    marker = (
        base.transform_filter("datum.is_capacity")
        .mark_point(shape="diamond", size=180, filled=True, stroke="black")
        .encode(y="median_decode_tok_s:Q")
    )
    rule = alt.Chart(lv).mark_rule(strokeDash=[6, 4], color="black").encode(y=alt.datum(t))
    return (
        alt.layer(band, ci, line, marker, rule, data=lv)
        .properties(width=260, height=220)
        .facet(column=alt.Column("deployment:N", title=None))
        .properties(
            title=alt.TitleParams(
                "Median decode rate vs concurrency",
                subtitle=f"Light band: min–max across streams; dark band: 90 % bootstrap interval;"
                f" dashed line: {t:g} tok/s; diamond: capacity.",
            )
        )
    )


def ttft_chart(data: dict[str, Any]) -> Any:
    lv = data["levels"]
    return (
        alt.Chart(lv)
        .mark_line(point=True)
        .encode(
            x=_concurrency_axis(lv),
            color=_workload_color(lv),
            y=alt.Y("median_ttft_s:Q", title="median time to first token (s)"),
            tooltip=["workload", "concurrency", alt.Tooltip("median_ttft_s:Q", format=".2f")],
        )
        .properties(width=260, height=180)
        .facet(column=alt.Column("deployment:N", title=None))
        .properties(title=alt.TitleParams("Time to first token (queueing and prefill)"))
    )


def _long_form(
    frame: pd.DataFrame, keys: list[str], labels: dict[str, str], name: str, value: str
) -> pd.DataFrame:
    """Columns ``labels`` stacked into (``name``, ``value``) rows, renamed for the legend."""
    out = frame.melt(id_vars=keys, value_vars=list(labels), var_name=name, value_name=value)
    out[name] = out[name].map(labels)
    return out


def throughput_chart(data: dict[str, Any]) -> Any:
    lv = _long_form(
        data["levels"],
        ["deployment", "workload", "concurrency"],
        {
            "aggregate_tok_s": "aggregate throughput",
            "concurrency_x_median_tok_s": "concurrency × median rate",
        },
        "measure",
        "tok_s",
    )
    return (
        alt.Chart(lv)
        .mark_line(point=True)
        .encode(
            x=_concurrency_axis(lv),
            color=_workload_color(lv),
            y=alt.Y("tok_s:Q", title="tokens per second"),
            strokeDash=alt.StrokeDash("measure:N", title=None),
            tooltip=["workload", "measure", "concurrency", alt.Tooltip("tok_s:Q", format=".1f")],
        )
        .properties(width=260, height=180)
        .facet(column=alt.Column("deployment:N", title=None))
        .properties(
            title=alt.TitleParams(
                "Aggregate throughput beside concurrency × median rate",
                subtitle="Σ(tokens − 1) / (latest last token − earliest first token); the two "
                "differ because streams start and end at different times.",
            )
        )
    )


def history_chart(data: dict[str, Any]) -> Any:
    h = data["history"].copy()
    h["series"] = h["deployment"] + " / " + h["workload"]
    return (
        alt.Chart(h)
        .mark_line(point=True)
        .encode(
            x=alt.X("started_at:T", title="night"),
            y=alt.Y("capacity_streams:Q", title="capacity (streams)"),
            color=alt.Color("series:N", title="deployment / workload"),
            tooltip=["run_id", "deployment", "workload", "capacity_streams"],
        )
        .properties(width=640, height=200, title="Capacity across nights")
    )


def prefill_chart(data: dict[str, Any]) -> Any:
    tl = data["timeline"]
    prefill = data["prefill"]
    window = (
        float(prefill["sliding_window_s"].dropna().iloc[0])
        if "sliding_window_s" in prefill and prefill["sliding_window_s"].notna().any()
        else 1.0
    )
    # layers carry no data of their own: the facet splits the one dataset by deployment, so
    # each panel shows its own line and shades its own prefill window
    base = alt.Chart().encode(x=alt.X("t_s:Q", title="seconds since the probe started"))
    band = (
        alt.Chart()
        .mark_rect(opacity=0.15, color="#cf222e")
        .encode(x="min(prefill_start_s):Q", x2="min(prefill_end_s):Q")
    )
    rate = (
        base.transform_filter("datum.series == 'background decode'")
        .mark_line(point=True)
        .encode(
            y=alt.Y("value:Q", title="background decode tok/s per stream"),
            tooltip=["t_s", alt.Tooltip("value:Q", format=".1f")],
        )
    )
    return (
        alt.layer(band, rate, data=tl)
        .properties(width=300, height=180)
        .facet(column=alt.Column("deployment:N", title=None))
        .properties(
            title=alt.TitleParams(
                "Decode rate of the other streams while a long prompt is prefilled",
                subtitle=[
                    "Shaded: from the long prompt's send to its first token (the prefill).",
                    f"Points: tokens per stream over the last {window:g} s, at each window's "
                    "middle.",
                ],
            )
        )
    )


def probe_ttft_chart(data: dict[str, Any]) -> Any:
    tl = data["timeline"]
    pts = tl[tl["series"] == "probe TTFT"]
    return (
        alt.Chart(pts)
        .mark_circle(size=60)
        .encode(
            x=alt.X("t_s:Q", title="probe sent at (s)"),
            y=alt.Y("value:Q", title="probe time to first token (s)"),
            tooltip=["t_s", alt.Tooltip("value:Q", format=".2f")],
        )
        .properties(width=300, height=160)
        .facet(column=alt.Column("deployment:N", title=None))
        .properties(title="Short requests arriving during the prefill wait for it")
    )


def cache_chart(data: dict[str, Any]) -> Any:
    c = _long_form(
        data["cache"],
        ["deployment"],
        {
            "cold_ttft_s": "cold",
            "warm_ttft_s": "warm (cached)",
            "control_ttft_s": "control (other document)",
        },
        "case",
        "ttft_s",
    )
    return (
        alt.Chart(c)
        .mark_bar()
        .encode(
            x=alt.X(
                "case:N", title=None, sort=["cold", "warm (cached)", "control (other document)"]
            ),
            y=alt.Y("ttft_s:Q", title="time to first token (s)"),
            color=alt.Color("case:N", legend=None),
            column=alt.Column("deployment:N", title=None),
            tooltip=["deployment", "case", alt.Tooltip("ttft_s:Q", format=".3f")],
        )
        .properties(width=200, height=160, title="Prompt cache: the same long document")
    )


def output_length_chart(data: dict[str, Any]) -> Any:
    ol = data["output_length"].copy()
    ol["series"] = (
        ol["deployment"]
        + " / "
        + ol["workload"]
        + " @ "
        + ol["concurrency"].astype(str)
        + " streams"
    )
    return (
        alt.Chart(ol)
        .mark_line(point=True)
        .encode(
            x=alt.X("requested_tokens:Q", title="output length (tokens)"),
            y=alt.Y("median_decode_tok_s:Q", title="median decode rate (tok/s)"),
            color=alt.Color("series:N", title=None),
            tooltip=[
                "series",
                "requested_tokens",
                alt.Tooltip("median_decode_tok_s:Q", format=".1f"),
            ],
        )
        .properties(width=420, height=200, title="Decode rate vs output length")
    )


def history_changes(data: dict[str, Any]) -> pd.DataFrame:
    """Pairs whose newest night in this report's history changed capacity against the night
    before (the change is the mart's: ``rpt_capacity_history.capacity_change``)."""
    h = data["history"]
    if h.empty:
        return pd.DataFrame()
    newest = h.sort_values(["started_at", "run_id"]).groupby(["deployment", "workload"]).tail(1)
    changed = newest[newest["capacity_change"].notna() & (newest["capacity_change"] != 0)]
    return (
        changed.rename(
            columns={
                "previous_capacity_streams": "previous",
                "capacity_streams": "current",
                "capacity_change": "change",
            }
        )[["deployment", "workload", "previous", "current", "change"]]
        .astype({"previous": int, "current": int, "change": int})
        .reset_index(drop=True)
    )


def _table(frame: pd.DataFrame, columns: dict[str, str], empty: str, missing: str = "—") -> str:
    """An HTML table; ``missing`` is what an absent value reads as (a comparison says the
    deployment was not measured in that run rather than a bare dash)."""
    if frame.empty:
        return f"<p class='muted'>{html.escape(empty)}</p>"
    head = "".join(f"<th>{html.escape(v)}</th>" for v in columns.values())
    body = []
    for _, row in frame.iterrows():
        cells = []
        for k in columns:
            v = row[k]
            if v is None or (pd.api.types.is_scalar(v) and pd.isna(v)):
                text = missing
            elif isinstance(v, float):
                text = f"{v:.1f}"
            else:
                text = str(v)
            cells.append(f"<td>{html.escape(text)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sparkcap — {title}</title>
<style>
body {{ font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #1f2328;
       background: #f6f8fa; }}
header {{ background: #0d1117; color: #fff; padding: 1.2rem 2rem; }}
header h1 {{ margin: 0; font-size: 1.4rem; }} header p {{ margin: 0.3rem 0 0; color: #c9d1d9; }}
main {{ padding: 1rem 2rem 3rem; max-width: 1400px; }}
section {{ background: #fff; border: 1px solid #d0d7de; border-radius: 8px; padding: 1rem 1.2rem;
          margin: 1rem 0; overflow-x: auto; }}
h2 {{ font-size: 1.1rem; margin-top: 0; }}
table {{ border-collapse: collapse; font-size: 0.85rem; }}
th, td {{ border-bottom: 1px solid #d0d7de; padding: 0.3rem 0.7rem; text-align: left; }}
th {{ background: #f6f8fa; }} .muted {{ color: #656d76; }} .bad {{ color: #cf222e; }}
.headline {{ font-size: 1.25rem; }} .note {{ font-size: 0.85rem; color: #656d76; }}
</style>
<script type="text/javascript">
{vega_bundle}
</script>
</head><body>
<header><h1>{title}</h1><p>{subtitle}</p></header>
<main>
{sections}
</main>
<script type="text/javascript">
const charts = {charts_json};
for (const [id, spec] of Object.entries(charts)) {{
  vegaEmbed('#' + id, spec, {{"actions": false, "renderer": "svg"}}).catch(console.error);
}}
</script>
</body></html>
"""


def render_report(
    db_path: Path,
    run_id: str | Sequence[str] | None = None,
    out_dir: Path | None = None,
    *,
    update_latest: bool = True,
    export_images: bool = True,
    night: date | None = None,
) -> ReportResult:
    """Render one run's report, or one over several runs (a list of ids, or ``night``: every
    built run that started that UTC day), written under a folder named for them."""
    import vl_convert as vlc
    from altair.utils._importers import vl_version_for_vl_convert

    if night is not None:
        runs = runs_of_night(Path(db_path), night)
        data = load_combined(Path(db_path), runs, combined_label(runs, night))
    elif isinstance(run_id, str) or run_id is None:
        data = load_data(Path(db_path), run_id)
    elif len(run_id) == 1:
        data = load_data(Path(db_path), run_id[0])
    else:
        data = load_combined(Path(db_path), run_id, combined_label(run_id))
    run_id = str(data["run_id"])
    root = Path(out_dir) if out_dir is not None else get_settings().reports_dir
    run_dir = root / run_id
    (run_dir / "charts").mkdir(parents=True, exist_ok=True)
    t = _threshold(data)
    charts: dict[str, Any] = {
        "headline": headline_chart(data),
        "rates": rate_chart(data),
        "ttft": ttft_chart(data),
        "throughput": throughput_chart(data),
        "history": history_chart(data),
    }
    probe_sections: list[str] = []
    if not data["prefill"].empty and not data["timeline"].empty:
        charts["prefill"] = prefill_chart(data)
        charts["probe_ttft"] = probe_ttft_chart(data)
        lines = []
        for r in data["prefill"].itertuples():
            dip = ""
            if pd.notna(getattr(r, "min_window_tok_s", None)):
                dip = (
                    f" In {r.sliding_window_s:g} s windows the rate bottomed at "
                    f"{r.min_window_tok_s:.1f} tok/s and stayed below {r.dip_share:.0%} of "
                    f"normal for {'at least ' if r.dip_truncated else ''}"
                    f"{r.dip_below_share_s:.1f} s."
                )
            lines.append(
                f"<li><b>{html.escape(str(r.deployment))}</b>: one "
                f"{int(r.long_prompt_tokens):,}-token uncached prompt took {r.long_ttft_s:.1f} s "
                f"to prefill ({r.prefill_tok_s:,.0f} tok/s). Meanwhile each of the "
                f"{int(r.n_background)} decoding streams fell from {r.before_tok_s:.1f} to "
                f"{r.during_tok_s:.1f} tok/s, losing {r.decode_lost_s:.1f} s of decode, and new "
                f"short requests waited {r.during_probe_ttft_s or 0:.1f} s for their first "
                f"token (up to {r.max_probe_ttft_s:.1f} s; {r.baseline_probe_ttft_s or 0:.2f} s "
                f"before).{dip}</li>"
            )
        probe_sections.append(
            "<section><h2>Long prefills</h2><p>Budget decode concurrency and long-context "
            "prefill separately:</p><ul>" + "".join(lines) + "</ul>"
            "<div id='chart-prefill'></div><div id='chart-probe_ttft'></div></section>"
        )
    if not data["cache"].empty:
        charts["cache"] = cache_chart(data)
        lines = [
            f"<li><b>{html.escape(str(r.deployment))}</b>: a cached "
            f"{int(r.document_tokens or 0):,}-token document cut TTFT from {r.cold_ttft_s:.2f} s "
            f"to {r.warm_ttft_s:.3f} s ({r.warm_cached_tokens or 0:,.0f} tokens reused); a "
            f"different document of the same size took {r.control_ttft_s:.2f} s.</li>"
            for r in data["cache"].itertuples()
        ]
        probe_sections.append(
            "<section><h2>Prompt reuse</h2><p>Route repeated long documents to the replica "
            "that has them cached:</p><ul>" + "".join(lines) + "</ul>"
            "<div id='chart-cache'></div></section>"
        )
    if not data["output_length"].empty:
        charts["output_length"] = output_length_chart(data)
        probe_sections.append(
            "<section><h2>Output length</h2><p>Longer outputs decode slower at the same "
            "concurrency (context grows): capacity depends on the length budget.</p>"
            "<div id='chart-output_length'></div></section>"
        )
    if not data["mixed"].empty:
        probe_sections.append(
            "<section><h2>Mixed load</h2><p>Code and prose streams in one wave, beside each "
            "workload alone at the same concurrency (the fleet headline sums alternatives, "
            "not this).</p>"
            + _table(
                data["mixed"],
                {
                    "deployment": "deployment",
                    "concurrency": "streams",
                    "stream_workload": "workload",
                    "n_streams": "of which",
                    "median_decode_tok_s": "median tok/s (mixed)",
                    "alone_median_decode_tok_s": "median tok/s (alone)",
                },
                "",
            )
            + "</section>"
        )
    if not data["links"].empty:
        links = data["links"].assign(
            state=data["links"]["healthy"].map({True: "ok", False: "UNHEALTHY"})
        )
        probe_sections.append(
            "<section><h2>Link health</h2>"
            + _table(
                links,
                {
                    "deployment": "deployment",
                    "link": "link",
                    "node_a": "from",
                    "node_b": "to",
                    "nominal_gbps": "nominal Gb/s",
                    "achieved_gbps": "achieved Gb/s",
                    "state": "state",
                    "error": "error",
                },
                "",
            )
            + "</section>"
        )
    if data["previous_run"]:
        from sparkcap.compare import compare

        diff = compare(Path(db_path), data["previous_run"], run_id)
        lv = diff["levels"].dropna(subset=["median_change_pct"])
        probe_sections.append(
            f"<section><h2>Compared with the previous run ({html.escape(data['previous_run'])})"
            "</h2><p class='note'>Same as <code>sparkcap compare</code>.</p>"
            + _table(
                diff["capacity"],
                {
                    "deployment": "deployment",
                    "workload": "workload",
                    "a_capacity": "before",
                    "b_capacity": "now",
                    "capacity_change": "change",
                },
                "",
                missing="not measured in this run",
            )
            + _table(
                lv,
                {
                    "deployment": "deployment",
                    "workload": "workload",
                    "concurrency": "streams",
                    "a_median_tok_s": "median before",
                    "b_median_tok_s": "median now",
                    "median_change_pct": "change %",
                    "aggregate_change_pct": "aggregate change %",
                },
                "",
            )
            + _table(
                diff["prefill_links"],
                {
                    "deployment": "deployment",
                    "a_prefill_tok_s": "prefill tok/s before",
                    "b_prefill_tok_s": "now",
                    "b_worst_link_gbps": "worst link Gb/s now",
                    "b_links_healthy": "links healthy",
                },
                "No prefill probe or link check in both runs.",
            )
            + "</section>"
        )
    result = ReportResult(run_id=run_id, index=run_dir / "index.html", latest=None)
    specs = {}
    for name, chart in charts.items():
        chart = chart.configure_axis(labelFontSize=11, titleFontSize=12).configure_title(
            fontSize=15, anchor="start"
        )
        specs[f"chart-{name}"] = chart.to_dict()
        if export_images:
            for ext in ("svg", "png"):
                path = run_dir / "charts" / f"{name}.{ext}"
                chart.save(str(path), scale_factor=2) if ext == "png" else chart.save(str(path))
                result.charts.append(path)

    fleet = data["fleet"]
    result.headline = {str(r.workload): int(r.capacity_streams) for r in fleet.itertuples()}
    headline_text = " or ".join(
        f"≈ {int(r.capacity_streams)} {r.workload}" for r in fleet.itertuples()
    )
    extrapolated = ", ".join(sorted({str(x) for x in fleet["extrapolated_deployments"].dropna()}))
    cap = data["capacity"].copy()
    cap["bracket"] = cap.apply(
        lambda r: (
            f"[{r['capacity_streams']}, {int(r['first_failing_level'])}]"
            if pd.notna(r["first_failing_level"])
            else f"≥ {r['capacity_streams']} (lower bound)"
        ),
        axis=1,
    )
    cap["interval"] = cap.apply(
        lambda r: (
            f"{r['ci_low_streams']}–{r['ci_high_streams']}"
            if pd.notna(r["ci_low_streams"])
            else "—"
        ),
        axis=1,
    )
    cap["flags"] = cap.apply(
        lambda r: ", ".join(
            x
            for x, on in (
                ("lower bound", r["is_lower_bound"]),
                ("non-monotonic", r["is_non_monotonic"]),
                (f"×{r['replicas']} replicas", r["replicas"] > 1),
            )
            if on
        ),
        axis=1,
    )
    dq = data["dq"]
    dq_link = ""
    dq_dir = run_dir / "dq"
    if (dq_dir / "summary.html").exists():
        dq_link += "<a href='dq/summary.html'>data-quality summary</a>"
    if (dq_dir / "data_docs" / "index.html").exists():
        dq_link += " · <a href='dq/data_docs/index.html'>Great Expectations Data Docs</a>"
    if not dq.empty:
        dq = dq.assign(
            result=dq.apply(
                lambda r: "pass" if r["success"] else ("FAIL" if r["blocking"] else "warn"), axis=1
            )
        )
    changes = history_changes(data)
    missing = sorted(
        {
            str(x)
            for r in fleet.itertuples()
            if isinstance(r.not_measured_deployments, str)
            for x in r.not_measured_deployments.split(", ")
        }
    )
    run = data["run"]
    status = f"{run[3]}" + (f" ({run[4]})" if run[4] else "")
    runs_section = (
        [
            "<section><h2>Runs in this report</h2><p class='note'>Each deployment and "
            "workload comes from the newest of these runs that measured it; the headline sums "
            "those rows.</p>"
            + _table(
                pd.DataFrame(
                    [(r[0], r[1], r[3]) for r in data["runs"]],
                    columns=["run_id", "started_at", "status"],
                ),
                {"run_id": "run", "started_at": "started", "status": "status"},
                "",
            )
            + "</section>"
        ]
        if data.get("runs")
        else []
    )
    sections = [
        f"<section><h2>Headline</h2><p class='headline'>At {t:g} tok/s the fleet sustains "
        f"<b>{html.escape(headline_text)}</b> streams.</p>"
        f"<p class='note'>Code and prose are alternative workloads, not a simultaneous mixed "
        f"load. Capacity is the largest tested concurrency whose median stream decodes at ≥ "
        f"{t:g} tok/s with every smaller level passing."
        + (f" Extrapolated replicas: {html.escape(extrapolated)}." if extrapolated else "")
        + "</p>"
        + (
            "<p class='bad'><b>Partial night:</b> the sum leaves out "
            f"{html.escape(', '.join(missing))} (not measured; see below).</p>"
            if missing
            else ""
        )
        + "<div id='chart-headline'></div></section>",
        *runs_section,
        *(
            [
                "<section><h2>Not measured tonight</h2><p class='note'>What an imperfect "
                "fleet cost this night, and why; everything else was measured as usual.</p>"
                + _table(
                    data["gaps"].fillna({"deployment": "(night)"}),
                    {
                        "deployment": "deployment",
                        "outcome": "what",
                        "reason": "why",
                    },
                    "",
                )
                + "</section>"
            ]
            if not data["gaps"].empty
            else []
        ),
        "<section><h2>Capacity per deployment</h2>"
        + _table(
            cap,
            {
                "deployment": "deployment",
                "workload": "workload",
                "capacity_streams": "capacity (streams)",
                "capacity_interpolated": "interpolated",
                "bracket": "bracket",
                "interval": "90 % interval",
                "n_valid_trials": "valid trials",
                "flags": "flags",
            },
            "no capacity rows",
        )
        + "</section>",
        *(
            [
                "<section><h2>Server metrics missing</h2><p class='note'>The server's own "
                "counters (speculative acceptance, generated tokens) could not be read around "
                "these waves, so those figures are missing, not zero.</p>"
                + _table(
                    data["metrics_missing"],
                    {
                        "deployment": "deployment",
                        "n_missing": "waves without metrics",
                        "n_waves": "of",
                        "example_error": "why (first)",
                    },
                    "",
                )
                + "</section>"
            ]
            if not data["metrics_missing"].empty
            else []
        ),
        "<section><h2>Decode rate</h2><div id='chart-rates'></div></section>",
        "<section><h2>Responsiveness</h2><div id='chart-ttft'></div></section>",
        "<section><h2>Throughput</h2><div id='chart-throughput'></div></section>",
        *probe_sections,
        "<section><h2>Invalid trials</h2><p class='note'>These trials never feed a capacity "
        "number.</p>"
        + _table(
            data["invalid"],
            {
                "deployment": "deployment",
                "workload": "workload",
                "concurrency": "streams",
                "trial": "trial",
                "invalid_reasons": "why",
            },
            "Every counted trial is valid.",
        )
        + "</section>",
        "<section><h2>Data quality</h2>"
        + (f"<p>{dq_link}</p>" if dq_link else "")
        + (
            _table(
                dq,
                {
                    "suite": "suite",
                    "expectation": "expectation",
                    "result": "result",
                    "unexpected_count": "offending rows",
                },
                "",
            )
            if not dq.empty
            else "<p class='muted'>This run has not been validated (`sparkcap validate`).</p>"
        )
        + "</section>",
        "<section><h2>History</h2><div id='chart-history'></div>"
        + _table(
            changes,
            {
                "deployment": "deployment",
                "workload": "workload",
                "previous": "previous night",
                "current": "this night",
                "change": "change",
            },
            "No capacity changed since the previous night.",
        )
        + "</section>",
        f"<section class='note'>Run {html.escape(run_id)} · started {run[1]} · status "
        f"{html.escape(status)} · sparkcap {html.escape(str(run[5] or __version__))} · "
        f"charts as PNG and SVG in <a href='charts/'>charts/</a></section>",
    ]
    page = PAGE.format(
        title=f"Interactive capacity — run {html.escape(run_id)}",
        subtitle=f"Median stream ≥ {t:g} generated tokens/s · from the sparkcap warehouse marts",
        vega_bundle=vlc.javascript_bundle(vl_version=vl_version_for_vl_convert()),  # type: ignore[call-arg]
        sections="\n".join(sections),
        charts_json=json.dumps(specs, default=str).replace("</", "<\\/"),
    )
    result.index.write_text(page, encoding="utf-8")
    if update_latest:
        latest = root / "latest"
        tmp = root / ".latest-tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        shutil.copytree(run_dir, tmp)
        if latest.exists():
            shutil.rmtree(latest)
        os.replace(tmp, latest)
        result.latest = latest / "index.html"
    return result
