"""The page and its publishing: one self-contained HTML file per report (Vega inlined so it
opens offline), PNG and SVG of every chart, and ``latest/`` replaced atomically."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import pandas as pd
from markupsafe import Markup

from sparkcap import __version__
from sparkcap.pages import render, table
from sparkcap.publish.compare import compare
from sparkcap.publish.marts import ContextLadderRow
from sparkcap.publish.marts.frames import load_combined, runs_of_night
from sparkcap.publish.night import NightReport, read_night
from sparkcap.publish.report.charts import (
    bound_chart,
    cache_chart,
    context_ladder_chart,
    headline_chart,
    history_chart,
    open_loop_chart,
    output_length_chart,
    prefill_chart,
    probe_ttft_chart,
    rate_chart,
    replay_concurrency_chart,
    search_path_chart,
    session_turns_chart,
    threshold_of,
    throughput_chart,
    ttft_chart,
)
from sparkcap.publish.text.capacity import fleet_headline
from sparkcap.publish.text.context_ladder import context_ladder_line
from sparkcap.publish.text.links import link_state
from sparkcap.publish.text.plan import plan_lines, rate_plan_lines
from sparkcap.publish.text.tables import thin_tail_words
from sparkcap.settings import get_settings


@dataclass
class ReportResult:
    run_id: str
    index: Path
    latest: Path | None
    charts: list[Path] = field(default_factory=list)
    headline: dict[str, int] = field(default_factory=dict)


# Characters that mean something to an HTML parser inside <script> ("<!--<script>" switches
# it into a state where "</script>" no longer ends the element; "&" and ">" in other
# contexts), and the two line separators older JavaScript forbade in strings. JSON may spell
# any character inside a string as \uXXXX, and outside strings none of them occurs.
_SCRIPT_UNSAFE = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def inline_json(value: Any) -> str:
    """JSON to place inside a ``<script>`` element: every chart spec carries the data's names
    (models, deployments, reasons), and a name such as ``<!--<script>`` would otherwise end
    or swallow the page's script, so that no chart renders."""
    text = json.dumps(value, default=str)
    for char, escaped in _SCRIPT_UNSAFE.items():
        text = text.replace(char, escaped)
    return text


def _table_markup(
    frame: pd.DataFrame, columns: dict[str, str], empty: str, missing: str = "—"
) -> Markup:
    return Markup(table(frame, columns, empty, missing))


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows for a template, with pandas' NaN as None (a missing figure is absent, not NaN)."""
    return [
        {k: (None if pd.api.types.is_scalar(v) and pd.isna(v) else v) for k, v in row.items()}
        for row in frame.to_dict("records")
    ]


# The charts a night draws only where it has their rows, in the page's order: (the chart's
# name, its frame, a column that must hold a value somewhere or None, the chart)
_CHARTS_OF_ROWS: tuple[tuple[str, str, str | None, Callable[[dict[str, Any]], Any]], ...] = (
    ("cache", "cache", None, cache_chart),
    ("output_length", "output_length", None, output_length_chart),
    ("sessions", "session_turns", None, session_turns_chart),
    ("ladder", "ladder_rungs", "cold_prompt_tokens", context_ladder_chart),
    ("search", "search_path", None, search_path_chart),
    ("open_loop", "open_loop_curve", None, open_loop_chart),
    ("replay", "replay_concurrency", None, replay_concurrency_chart),
    ("bounds", "bounds", "bound_decode_tok_s", bound_chart),
)


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

    one: NightReport | None = None  # a report over several runs has no one night's plan
    if night is not None:
        runs = runs_of_night(Path(db_path), night)
        data = load_combined(Path(db_path), runs, combined_label(runs, night))
    elif run_id is None or isinstance(run_id, str) or len(run_id) == 1:
        single = run_id if run_id is None or isinstance(run_id, str) else run_id[0]
        one = read_night(Path(db_path), single, frames=True)
        data = one.frames or {}
    else:
        data = load_combined(Path(db_path), run_id, combined_label(run_id))
    run_id = str(data["run_id"])
    root = Path(out_dir) if out_dir is not None else get_settings().reports_dir
    run_dir = root / run_id
    (run_dir / "charts").mkdir(parents=True, exist_ok=True)
    t = threshold_of(data)
    charts: dict[str, Any] = {
        "headline": headline_chart(data),
        "rates": rate_chart(data),
        "ttft": ttft_chart(data),
        "throughput": throughput_chart(data),
        "history": history_chart(data),
    }
    if not data["prefill"].empty and not data["timeline"].empty:
        charts["prefill"] = prefill_chart(data)
        charts["probe_ttft"] = probe_ttft_chart(data)
    for name, frame, column, chart in _CHARTS_OF_ROWS:
        rows = data.get(frame, pd.DataFrame())
        if not rows.empty and (column is None or rows[column].notna().any()):
            charts[name] = chart(data)
    comparison = None
    if data["previous_run"]:
        diff = compare(Path(db_path), data["previous_run"], run_id)
        comparison = {
            "previous_run": data["previous_run"],
            "capacity": diff["capacity"],
            "levels": diff["levels"].dropna(subset=["median_change_pct"]),
            "prefill_links": diff["prefill_links"],
        }
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
    # a workload no deployment measured has no fleet figure (its sum of 0 is no capacity)
    measured_fleet = [r for r in fleet.itertuples() if r.n_measured_deployments > 0]
    result.headline = {str(r.workload): int(r.capacity_streams) for r in measured_fleet}
    dq = data["dq"]
    dq_links = [
        (href, label)
        for href, label in (
            ("dq/summary.html", "data-quality summary"),
            ("dq/data_docs/index.html", "Great Expectations Data Docs"),
        )
        if (run_dir / href).exists()
    ]
    if not dq.empty:
        dq = dq.assign(
            result=dq.apply(
                lambda r: "pass" if r["success"] else ("FAIL" if r["blocking"] else "warn"), axis=1
            )
        )
    run = data["run"]
    links = data["links"]
    if not links.empty:
        links = links.assign(
            state=[
                link_state(bool(h), None if pd.isna(g) else float(g))
                for h, g in zip(links["healthy"], links["achieved_gbps"], strict=True)
            ]
        )
    body = render(
        "report.html.j2",
        table=_table_markup,
        t_text=f"{t:g}",
        headline_text=fleet_headline(
            [(str(r.workload), int(r.capacity_streams)) for r in measured_fleet]
        ),
        unmeasured_text=", ".join(
            str(r.workload) for r in fleet.itertuples() if r.n_measured_deployments == 0
        ),
        extrapolated=", ".join(
            sorted({str(x) for x in fleet["extrapolated_deployments"].dropna()})
        ),
        missing=sorted(
            {
                str(x)
                for r in fleet.itertuples()
                if isinstance(r.not_measured_deployments, str)
                for x in r.not_measured_deployments.split(", ")
            }
        ),
        runs=pd.DataFrame(
            [(r[0], r[1], r[3]) for r in data["runs"]],
            columns=["run_id", "started_at", "status"],
        )
        if data.get("runs")
        else None,
        gaps=data["gaps"].fillna({"deployment": "(night)"}),
        capacity=data["capacity"],  # bracket, interval and flags are rpt_capacity's texts
        searched=not data["search_path"].empty,
        search_path=data["search_path"],
        metrics_missing=data["metrics_missing"],
        prefill=_records(data["prefill"]) if "prefill" in charts else [],
        cache=_records(data["cache"]),
        output_length="output_length" in charts,
        ladder=[
            context_ladder_line(ContextLadderRow(**{f: r[f] for f in ContextLadderRow._fields}))
            for r in _records(data.get("ladder", pd.DataFrame()))
        ],
        ladder_chart="ladder" in charts,
        sessions="sessions" in charts,
        session_cache=_records(data.get("session_cache", pd.DataFrame())),
        mixed=data["mixed"],
        links=links,
        comparison=comparison,
        invalid=data["invalid"],
        bottlenecks=data.get("bottlenecks", pd.DataFrame()),
        tiers=data.get("tiers", pd.DataFrame()),
        tier_columns=data.get("tier_columns", {}),
        flagged_changes=data.get("flagged_changes", pd.DataFrame()),
        energy=data.get("energy", pd.DataFrame()),
        plan_lines=plan_lines(one.plan) if one is not None and one.plan else [],
        plan_routing=data.get("plan_routing", pd.DataFrame()),
        plan_rates=data.get("plan_rates", pd.DataFrame()),
        plan_rates_lines=rate_plan_lines(run_id, one.plan.threshold_tok_s, one.plan_rates)
        if one is not None and one.plan and one.plan_rates
        else [],
        replay_fleet=data.get("replay_fleet", pd.DataFrame()),
        replays=_replays_with_p90_words(data.get("replays", pd.DataFrame())),
        replay_chart="replay" in charts,
        open_loop_chart="open_loop" in charts,
        bound_chart="bounds" in charts,
        dq_links=dq_links,
        dq=None if dq.empty else dq,
        changes=history_changes(data),
        run_id=run_id,
        started=run[1],
        status=f"{run[3]}" + (f" ({run[4]})" if run[4] else ""),
        version=str(run[5] or __version__),
    )
    page = render(
        "page.html.j2",
        title=f"Interactive capacity — run {run_id}",
        subtitle=f"Median stream ≥ {t:g} generated tokens/s · from the sparkcap warehouse marts",
        vega_bundle=Markup(vlc.javascript_bundle(vl_version=vl_version_for_vl_convert())),  # type: ignore[call-arg]
        body=Markup(body),  # rendered (and escaped) by report.html.j2
        charts_json=Markup(inline_json(specs)),
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


def _replays_with_p90_words(replays: pd.DataFrame) -> pd.DataFrame:
    """The TTFT p90 where enough samples support it, else the words every page uses, in the
    column's place (the page shows the columns in order)."""
    if replays.empty:
        return replays
    p90 = [
        str(s) if ok else thin_tail_words(int(n or 0), None if pd.isna(m) else int(m))
        for ok, s, n, m in zip(
            replays["ttft_p90_is_supported"].fillna(False),
            replays["ttft_scheduled_p90_s"],
            replays["ttft_samples"].fillna(0),
            replays["ttft_min_samples"],
            strict=True,
        )
    ]
    replays = replays.copy()
    replays.insert(list(replays.columns).index("ttft_p90_is_supported"), "ttft_scheduled_p90", p90)
    return replays.drop(
        columns=[
            "ttft_p90_is_supported",
            "ttft_scheduled_p90_s",
            "ttft_samples",
            "ttft_min_samples",
        ]
    )


def combined_label(run_ids: Sequence[str], night: date | None = None) -> str:
    """A folder name for a report over several runs: the night, or a digest of the runs."""
    if night is not None:
        return f"night-{night.isoformat()}"
    digest = hashlib.sha256("\n".join(sorted(run_ids)).encode()).hexdigest()[:8]
    return f"combined-{len(run_ids)}-runs-{digest}"


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
        )[["deployment", "workload", "previous", "current", "change", "previous_method", "method"]]
        .astype({"previous": int, "current": int, "change": int})
        .reset_index(drop=True)
    )
