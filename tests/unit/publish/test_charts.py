"""What a reader sees in the charts: ticks at the tested levels only, legends naming only the
measured workloads, and the headline's total inside the plot."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from sparkcap.publish.report import headline_chart, rate_chart, throughput_chart, ttft_chart
from sparkcap.publish.report.charts import bound_chart, context_ladder_chart, history_chart


def _levels(levels: list[int], workloads: list[str]) -> pd.DataFrame:
    rows = []
    for wl in workloads:
        for c in levels:
            rate = 40.0 / c
            rows.append(
                dict(
                    deployment="d",
                    workload=wl,
                    concurrency=c,
                    median_decode_tok_s=rate,
                    min_decode_tok_s=rate * 0.9,
                    max_decode_tok_s=rate * 1.1,
                    ci_low_tok_s=rate * 0.95,
                    ci_high_tok_s=rate * 1.05,
                    n_valid_trials=3,
                    median_ttft_s=0.2,
                    aggregate_tok_s=rate * c,
                    concurrency_x_median_tok_s=rate * c,
                    capacity_streams=2,
                )
            )
    return pd.DataFrame(rows)


def _data(levels: list[int], workloads: list[str]) -> dict[str, Any]:
    cap = pd.DataFrame(
        [
            dict(deployment="d", workload=wl, capacity_streams=27, replicas=1, threshold_tok_s=20)
            for wl in workloads
        ]
    )
    fleet = pd.DataFrame(
        [
            dict(workload=wl, capacity_streams=27, threshold_tok_s=20, n_measured_deployments=1)
            for wl in workloads
        ]
    )
    return {"levels": _levels(levels, workloads), "capacity": cap, "fleet": fleet}


def _encodings(spec: dict[str, Any], channel: str) -> list[dict[str, Any]]:
    """Every encoding of ``channel`` anywhere in a (layered, faceted) spec."""
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            enc = node.get("encoding")
            if isinstance(enc, dict) and channel in enc:
                found.append(enc[channel])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(spec)
    return found


def test_concurrency_ticks_are_the_tested_levels() -> None:
    for chart in (rate_chart, ttft_chart, throughput_chart):
        spec = chart(_data([1, 2, 4], ["code", "prose"])).to_dict()
        xs = [x for x in _encodings(spec, "x") if x.get("field") == "concurrency"]
        assert xs, chart.__name__
        for x in xs:
            assert x["axis"]["values"] == [1, 2, 4], chart.__name__
            assert x["axis"]["format"] == "d"
            assert x["scale"]["domain"] == [1, 4]


def test_legend_lists_only_the_measured_workloads() -> None:
    spec = rate_chart(_data([1, 2], ["prose"])).to_dict()
    colors = [c for c in _encodings(spec, "color") if c.get("field") == "workload"]
    assert colors and all(c["scale"]["domain"] == ["prose"] for c in colors)
    assert all(c["scale"]["range"] == ["#e45756"] for c in colors)  # prose keeps its colour
    both = rate_chart(_data([1, 2], ["code", "prose"])).to_dict()
    colors = [c for c in _encodings(both, "color") if c.get("field") == "workload"]
    assert all(c["scale"]["domain"] == ["code", "prose"] for c in colors)


def test_headline_total_has_room_inside_the_plot() -> None:
    spec = headline_chart(_data([1, 2], ["code"])).to_dict()
    xs = [x for x in _encodings(spec, "x") if x.get("field") == "streams" and "scale" in x]
    assert xs and xs[0]["scale"]["domain"][1] > 27 * 1.1
    legends = [c for c in _encodings(spec, "color") if c.get("field") == "label"]
    assert legends and legends[0]["legend"]["labelLimit"] == 0  # "qwen ×2 (extrapolated)"


def test_headline_totals_are_the_fleet_marts_and_a_workload_measuring_nothing_has_none() -> None:
    data = _data([1, 2], ["code", "prose"])
    # the fleet mart's totals, whatever the capacity rows would sum to
    data["fleet"] = pd.DataFrame(
        [
            dict(
                workload="code", capacity_streams=54, threshold_tok_s=20, n_measured_deployments=1
            ),
            dict(
                workload="prose", capacity_streams=0, threshold_tok_s=20, n_measured_deployments=0
            ),
        ]
    )
    title = headline_chart(data).to_dict()["title"]["text"]
    assert title == "Fleet capacity at 20 tok/s: ≈ 54 code streams"  # prose measured nothing
    data["fleet"] = data["fleet"].assign(n_measured_deployments=0)
    assert headline_chart(data).to_dict()["title"]["text"].endswith(": not measured")


def test_search_path_chart() -> None:
    from sparkcap.publish.report.charts import search_path_chart

    path = pd.DataFrame(
        [
            dict(
                deployment="d",
                workload="code",
                search_step=i + 1,
                kind=k,
                concurrency=c,
                verdict=v,
                n_trials=1,
                median_decode_tok_s=20.0,
                ci_low_tok_s=19.0,
                ci_high_tok_s=21.0,
                stop_reason="x",
                next_action="y",
            )
            for i, (k, c, v) in enumerate(
                [
                    ("level", 1, "pass"),
                    ("level", 2, "pass"),
                    ("level", 4, "fail"),
                    ("level", 3, "straddles"),
                    ("sustain", 3, "pass"),
                ]
            )
        ]
    )
    spec = search_path_chart({"search_path": path}).to_dict()
    assert spec["facet"]["column"]["field"] == "deployment"
    assert spec["facet"]["row"]["field"] == "workload"
    layers = spec["spec"]["layer"]
    y = layers[1]["encoding"]["y"]
    assert y["scale"]["type"] == "log" and y["axis"]["values"] == [1, 2, 3, 4]
    colour = layers[1]["encoding"]["color"]["scale"]
    assert colour["domain"] == ["pass", "fail", "straddles"]  # only the verdicts present
    shape = layers[1]["encoding"]["shape"]["scale"]
    assert shape["range"] == ["circle", "diamond"]


def test_history_draws_the_baseline_band_and_rings_flagged_nights() -> None:
    nights = pd.date_range("2026-11-01", periods=4, freq="D", tz="UTC")
    history = pd.DataFrame(
        dict(
            run_id=[f"r{i}" for i in range(4)],
            started_at=nights,
            deployment="d",
            workload="code",
            method="grid",
            capacity_streams=[8, 8, 8, 6],
            baseline_low_streams=[None, None, 7.0, 7.0],
            baseline_high_streams=[None, None, 9.0, 9.0],
            is_change=[False, False, False, True],
        )
    )
    spec = history_chart({"history": history}).to_dict()
    assert [e["field"] for e in _encodings(spec, "y2")] == ["baseline_high_streams"]
    assert {"filter": "datum.is_change"} in [
        t for layer in spec["layer"] for t in layer.get("transform", [])
    ]


def test_the_bound_chart_sets_the_measured_curve_beside_the_bound() -> None:
    bounds = pd.DataFrame(
        dict(
            deployment="d",
            workload="code",
            concurrency=[1, 2, 4],
            median_decode_tok_s=[40.0, 30.0, 18.0],
            bound_decode_tok_s=[50.0, 38.0, 22.0],
            share_of_bound=[0.8, 0.79, 0.82],
            threshold_tok_s=20,
        )
    )
    data = {"bounds": bounds, **_data([1, 2, 4], ["code"])}
    spec = bound_chart(data).to_dict()
    values = next(iter(spec["datasets"].values()))
    assert {v["series"] for v in values} == {"measured median", "memory-bandwidth bound"}
    assert sorted(v["tok_s"] for v in values if v["series"] != "measured median") == [
        22.0,
        38.0,
        50.0,
    ]


def test_the_rate_band_draws_every_level_it_has() -> None:
    """The min–max band is every level's (a filter on another chart's columns once emptied it,
    and Vega warned of an infinite extent in the report)."""
    spec = rate_chart(_data([1, 2, 4], ["code"])).to_dict()
    assert "baseline" not in str(spec)
    assert [e["field"] for e in _encodings(spec, "y2")][:1] == ["max_decode_tok_s"]


def test_the_context_ladder_chart_draws_both_ttfts_the_ceiling_and_the_background() -> None:
    rungs = pd.DataFrame(
        dict(
            deployment="d",
            rung_tokens=[1024, 2048, 8000],
            cold_prompt_tokens=[1030, 2060, None],  # the refused rung has no point
            cold_ttft_s=[0.3, 0.6, None],
            warm_ttft_s=[0.05, 0.06, None],
            background_prefill_tok_s=[4.0, 2.0, None],
            background_outside_tok_s=[30.0, 29.0, None],
            ttft_ceiling_s=0.8,
        )
    )
    spec = context_ladder_chart({"ladder_rungs": rungs}).to_dict()
    datasets = list(spec["datasets"].values())
    cases = {v.get("case") for d in datasets for v in d} - {None}
    assert cases == {"cold (new document)", "warm (same document)"}
    windows = {v.get("window") for d in datasets for v in d} - {None}
    assert windows == {"during the cold prefill", "outside prefills"}
    assert [v["ttft_ceiling_s"] for d in datasets for v in d if len(v) == 1] == [0.8]
    assert all(v.get("cold_prompt_tokens") is not None for d in datasets for v in d if len(v) > 1)


def test_the_session_turns_chart_draws_rate_and_ttft_per_turn_with_the_ceiling() -> None:
    from sparkcap.publish.report.charts import session_turns_chart

    turns = pd.DataFrame(
        dict(
            deployment="d",
            concurrent_sessions=[1, 1, 2, 2],
            turn_index=[0, 1, 0, 1],
            median_prompt_tokens=[400, 480, 400, 480],
            median_cached_tokens=[0, 384, 0, 384],
            median_decode_tok_s=[50.0, 49.0, 45.0, 44.0],
            ttft_quantile_s=[0.2, 0.05, 0.6, 0.3],
            ttft_ceiling_s=5.0,
            # the last turn's TTFT rests on fewer samples than a p90 needs
            n_ttft_samples=[64, 64, 128, 40],
            ttft_quantile_min_samples=64,
            ttft_quantile_is_supported=[True, True, True, False],
        )
    )
    spec = session_turns_chart({"session_turns": turns}).to_dict()
    rows = [v for d in spec["datasets"].values() for v in d]
    assert {v.get("series") for v in rows} - {None} == {"d @ 1 sessions", "d @ 2 sessions"}
    shown = {(v["concurrent_sessions"], v["turn_index"]): v for v in rows if "series" in v}
    assert shown[(2, 1)]["ttft_quantile_s"] is None  # no figure, and the tooltip says why
    assert shown[(2, 1)]["ttft_support"] == "not enough samples (40 of 64)"
    assert shown[(2, 0)]["ttft_quantile_s"] == 0.6 and shown[(2, 0)]["ttft_support"] == "128 turns"
    assert "1 of 4 points left out" in json.dumps(spec["hconcat"][1]["title"])
    assert [v["ttft_ceiling_s"] for v in rows if len(v) == 1] == [5.0]
    fields = {c["encoding"]["y"]["field"] for c in spec["hconcat"][1]["layer"]}
    assert fields == {"ttft_quantile_s", "ttft_ceiling_s"}


def test_the_replay_chart_sets_streams_in_flight_beside_what_the_plan_offered() -> None:
    from sparkcap.publish.report.charts import replay_concurrency_chart

    rows = [
        dict(deployment=d, rate_factor=f, seed=3, t_s=t, streams_in_flight=n, verdict=v,
             offered_streams=8 * f)
        for d, f, v, n in (("steady", 1.0, "holds", 8), ("steady", 1.3, "fails", 14))
        for t in range(5)
    ]  # fmt: skip
    spec = replay_concurrency_chart({"replay_concurrency": pd.DataFrame(rows)}).to_dict()
    assert spec["facet"]["row"]["field"] == "replay" and spec["facet"]["column"]["field"] == (
        "deployment"
    )
    line, rule = spec["spec"]["layer"]
    assert line["mark"]["type"] == "line" and line["encoding"]["y"]["field"] == "streams_in_flight"
    assert rule["mark"]["type"] == "rule" and rule["encoding"]["y"]["field"] == "offered_streams"
    data = next(iter(spec["datasets"].values()))
    assert {r["replay"] for r in data} == {"1× (seed 3)", "1.3× (seed 3)"}
