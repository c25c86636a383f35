"""The page and its publishing: one self-contained HTML file per report (Vega inlined so it
opens offline), PNG and SVG of every chart, and ``latest/`` replaced atomically."""

from __future__ import annotations

import html
import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import pandas as pd
from markupsafe import Markup

from sparkcap import __version__
from sparkcap.report.charts import (
    cache_chart,
    headline_chart,
    history_chart,
    output_length_chart,
    prefill_chart,
    probe_ttft_chart,
    rate_chart,
    threshold_of,
    throughput_chart,
    ttft_chart,
)
from sparkcap.report.data import (
    combined_label,
    history_changes,
    load_combined,
    load_data,
    runs_of_night,
)
from sparkcap.report.pages import render, table
from sparkcap.settings import get_settings


@dataclass
class ReportResult:
    run_id: str
    index: Path
    latest: Path | None
    charts: list[Path] = field(default_factory=list)
    headline: dict[str, int] = field(default_factory=dict)


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
    t = threshold_of(data)
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
            + table(
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
            + table(
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
            + table(
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
            + table(
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
            + table(
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
    cap = data["capacity"]  # bracket, interval and flags are rpt_capacity's texts
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
            + table(
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
                + table(
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
        + table(
            cap,
            {
                "deployment": "deployment",
                "workload": "workload",
                "capacity_streams": "capacity (streams)",
                "capacity_interpolated": "interpolated",
                "bracket": "bracket",
                "capacity_interval": "90 % interval",
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
                + table(
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
        + table(
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
            table(
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
        + table(
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
    page = render(
        "page.html.j2",
        title=f"Interactive capacity — run {run_id}",
        subtitle=f"Median stream ≥ {t:g} generated tokens/s · from the sparkcap warehouse marts",
        vega_bundle=Markup(vlc.javascript_bundle(vl_version=vl_version_for_vl_convert())),  # type: ignore[call-arg]
        # sections are assembled from escaped pieces (names pass through html.escape or table)
        sections=[Markup(x) for x in sections],
        charts_json=Markup(json.dumps(specs, default=str).replace("</", "<\\/")),
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
