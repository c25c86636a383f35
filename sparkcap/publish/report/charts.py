"""The report's charts: pure functions from the loaded frames to Altair specs (one colour per
workload in every chart, ticks at tested levels), unit-tested on their encodings."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from sparkcap.publish.text.capacity import fleet_headline
from sparkcap.publish.text.tables import thin_tail_words

WORKLOAD_COLORS = {"code": "#1f77b4", "prose": "#e45756"}


def threshold_of(data: dict[str, Any]) -> float:
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


def _over_concurrency(frame: pd.DataFrame) -> Any:
    """A chart of ``frame`` against concurrency (:func:`_concurrency_axis`), one colour per
    workload (:func:`_workload_color`)."""
    return alt.Chart(frame).encode(x=_concurrency_axis(frame), color=_workload_color(frame))


def _per_deployment(
    chart: Any,
    title: Any,
    width: int = 260,
    height: int = 180,
    *,
    row: str | None = None,
    data: Any = alt.Undefined,
) -> Any:
    """One panel per deployment, side by side (and one row of them per value of the ``row``
    field), the same size in every chart of a kind; ``data``: the layers' own, where they
    carry none."""
    return (
        chart.properties(width=width, height=height)
        .facet(
            column=alt.Column("deployment:N", title=None),
            row=alt.Undefined if row is None else alt.Row(row, title=None),
            data=data,
        )
        .properties(title=title)
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
    # the totals are fct_fleet_capacity's (a workload no deployment measured has none: its
    # zeros are no capacity), never a sum made here
    fleet = data["fleet"]
    totals = fleet[fleet["n_measured_deployments"] > 0].rename(
        columns={"capacity_streams": "streams"}
    )[["workload", "streams"]]
    t = threshold_of(data)
    bars = (
        alt.Chart(cap)
        .mark_bar()
        .encode(
            y=alt.Y("workload:N", title=None, sort=["code", "prose"]),
            # room to the right of the longest bar for its bold total
            x=alt.X(
                "streams:Q",
                title=f"concurrent streams with median ≥ {t:g} tok/s",
                scale=alt.Scale(
                    domain=[
                        0,
                        max(1.0, float(totals["streams"].max() if not totals.empty else 0) * 1.12),
                    ]
                ),
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
    summary = fleet_headline([(str(r.workload), int(r.streams)) for r in totals.itertuples()])
    return (bars + text).properties(
        width=640,
        height=120,
        title=alt.TitleParams(
            f"Fleet capacity at {t:g} tok/s: {summary or 'not measured'}",
            subtitle="Alternative workloads, not a mixed load. Faded segments count a measured "
            "replica once per identical replica.",
        ),
    )


def rate_chart(data: dict[str, Any]) -> Any:
    lv = data["levels"].copy()
    lv["is_capacity"] = lv["concurrency"] == lv["capacity_streams"]
    t = threshold_of(data)
    base = _over_concurrency(lv)
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
    return _per_deployment(
        alt.layer(band, ci, line, marker, rule, data=lv),
        alt.TitleParams(
            "Median decode rate vs concurrency",
            subtitle=f"Light band: min–max across streams; dark band: 90 % bootstrap interval;"
            f" dashed line: {t:g} tok/s; diamond: capacity.",
        ),
        height=220,
    )


def _lines_per_deployment(frame: pd.DataFrame, title: Any, **encoding: Any) -> Any:
    """A line per workload against concurrency, a point per level, one panel per deployment;
    ``encoding``: the y axis, the tooltip and any other channel."""
    return _per_deployment(_over_concurrency(frame).mark_line(point=True).encode(**encoding), title)


def ttft_chart(data: dict[str, Any]) -> Any:
    lv = data["levels"]
    return _lines_per_deployment(
        lv,
        alt.TitleParams("Time to first token (queueing and prefill)"),
        y=alt.Y("median_ttft_s:Q", title="median time to first token (s)"),
        tooltip=["workload", "concurrency", alt.Tooltip("median_ttft_s:Q", format=".2f")],
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
    return _lines_per_deployment(
        lv,
        alt.TitleParams(
            "Aggregate throughput beside concurrency × median rate",
            subtitle="Σ(tokens − 1) / (latest last token − earliest first token); the two "
            "differ because streams start and end at different times.",
        ),
        y=alt.Y("tok_s:Q", title="tokens per second"),
        strokeDash=alt.StrokeDash("measure:N", title=None),
        tooltip=["workload", "measure", "concurrency", alt.Tooltip("tok_s:Q", format=".1f")],
    )


def history_chart(data: dict[str, Any]) -> Any:
    """Capacity per night, with the baseline band fct_changes tested each night against and
    the nights it flagged ringed (no band for a warehouse without the mart, or before a
    baseline has enough nights)."""
    h = data["history"].copy()
    h["series"] = h["deployment"] + " / " + h["workload"]
    if "is_change" not in h:
        h = h.assign(baseline_low_streams=None, baseline_high_streams=None, is_change=False)
    base = alt.Chart(h).encode(
        x=alt.X("started_at:T", title="night"),
        color=alt.Color("series:N", title="deployment / workload"),
    )
    band = (
        base.transform_filter("isValid(datum.baseline_low_streams)")
        .mark_area(opacity=0.15)
        .encode(
            y=alt.Y("baseline_low_streams:Q", title="capacity (streams)"),
            y2="baseline_high_streams:Q",
        )
    )
    line = base.mark_line(point=True).encode(
        y=alt.Y("capacity_streams:Q", title="capacity (streams)"),
        shape=alt.Shape("method:N", title="method"),
        tooltip=[
            "run_id",
            "deployment",
            "workload",
            "method",
            "capacity_streams",
            "baseline_low_streams",
            "baseline_high_streams",
            "is_change",
        ],
    )
    flagged = (
        base.transform_filter("datum.is_change")
        .mark_point(size=160, filled=False, color="#d62728", strokeWidth=2)
        .encode(y="capacity_streams:Q")
    )
    # a layer with no rows makes Vega warn of an infinite extent: draw the band and the
    # rings only where there is one
    layers = [line]
    if h["baseline_low_streams"].notna().any() and h["baseline_high_streams"].notna().any():
        layers.insert(0, band)
    if h["is_change"].fillna(False).astype(bool).any():
        layers.append(flagged)
    return alt.layer(*layers).properties(
        width=640,
        height=200,
        title=alt.Title(
            "Capacity across nights",
            subtitle="Band: the baseline of the comparable nights before; ringed: a change "
            "fct_changes flagged",
        ),
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
    return _per_deployment(
        alt.layer(band, rate, data=tl),
        width=300,
        title=alt.TitleParams(
            "Decode rate of the other streams while a long prompt is prefilled",
            subtitle=[
                "Shaded: from the long prompt's send to its first token (the prefill).",
                f"Points: tokens per stream over the last {window:g} s, at each window's middle.",
            ],
        ),
    )


def probe_ttft_chart(data: dict[str, Any]) -> Any:
    tl = data["timeline"]
    pts = tl[tl["series"] == "probe TTFT"]
    return _per_deployment(
        alt.Chart(pts)
        .mark_circle(size=60)
        .encode(
            x=alt.X("t_s:Q", title="probe sent at (s)"),
            y=alt.Y("value:Q", title="probe time to first token (s)"),
            tooltip=["t_s", alt.Tooltip("value:Q", format=".2f")],
        ),
        "Short requests arriving during the prefill wait for it",
        width=300,
        height=160,
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


def session_turns_chart(data: dict[str, Any]) -> Any:
    """How agent sessions fare as their context grows: per turn, the turns' median decode
    rate and their TTFT at the quantile the level rule holds to the ceiling, one line per
    deployment and level (concurrent sessions)."""
    st = data["session_turns"].copy()
    st["series"] = st["deployment"] + " @ " + st["concurrent_sessions"].astype(str) + " sessions"
    # a tail over fewer turns than support it (dbt macro tail_min_samples) is no figure: the
    # point is left out and its tooltip says why
    supported = st.get("ttft_quantile_is_supported", pd.Series(False, index=st.index))
    supported = supported.fillna(False).astype(bool)
    st.loc[~supported, "ttft_quantile_s"] = None
    n_samples = st.get("n_ttft_samples", pd.Series(0, index=st.index)).fillna(0).astype(int)
    need = st.get("ttft_quantile_min_samples", pd.Series(None, index=st.index))
    st["ttft_support"] = [
        f"{n} turns" if ok else thin_tail_words(n, None if pd.isna(m) else int(m))
        for n, m, ok in zip(n_samples, need, supported, strict=True)
    ]
    n_hidden = int((~supported).sum())
    base = alt.Chart(st).encode(
        x=alt.X("turn_index:O", title="turn (context grows)"),
        color=alt.Color("series:N", title=None),
        tooltip=[
            "series",
            "turn_index",
            alt.Tooltip("median_prompt_tokens:Q", title="prompt tokens", format=",.0f"),
            alt.Tooltip("median_cached_tokens:Q", title="cached tokens", format=",.0f"),
            alt.Tooltip("median_decode_tok_s:Q", format=".1f"),
            alt.Tooltip("ttft_quantile_s:Q", title="TTFT (quantile) s", format=".2f"),
            alt.Tooltip("ttft_support:N", title="TTFT samples"),
        ],
    )
    rate = base.mark_line(point=True).encode(
        y=alt.Y("median_decode_tok_s:Q", title="median turn decode rate (tok/s)")
    )
    ttft = base.mark_line(point=True).encode(
        y=alt.Y("ttft_quantile_s:Q", title="turn TTFT at the quantile (s)")
    )
    ceiling = (
        alt.Chart(pd.DataFrame({"ttft_ceiling_s": [float(st["ttft_ceiling_s"].iloc[0])]}))
        .mark_rule(strokeDash=[4, 3], color="#d62728")
        .encode(y="ttft_ceiling_s:Q", tooltip=[alt.Tooltip("ttft_ceiling_s:Q", title="ceiling s")])
    )
    return alt.hconcat(
        rate.properties(width=300, height=200, title="Decode rate by turn"),
        (ttft + ceiling).properties(
            width=300,
            height=200,
            title=alt.Title(
                "Time to first token by turn (dashed: the ceiling)",
                subtitle=(
                    f"{n_hidden} of {len(st)} points left out: not enough samples for the quantile"
                    if n_hidden
                    else ""
                ),
            ),
        ),
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


VERDICT_COLORS = {
    "pass": "#2ca02c",
    "fail": "#d62728",
    "straddles": "#ff7f0e",
    "incomplete": "#7f7f7f",
}


def open_loop_chart(data: dict[str, Any]) -> Any:
    """Per deployment: the open-loop model's predicted median stream rate against requests a
    minute for each workload, the threshold (dashed), each lambda* (a rule in the workload's
    colour) and the replays' measured medians on it (points): a model that holds puts the
    points on their curve."""
    curve = data["open_loop_curve"].copy()
    caps = data["open_loop_capacity"].copy()
    t = threshold_of(data)
    colour = alt.Color("workload:N", title="workload")
    line = (
        alt.Chart(curve)
        .mark_line()
        .encode(
            x=alt.X("requests_per_min:Q", title="requests a minute (Poisson arrivals)"),
            y=alt.Y("predicted_median_tok_s:Q", title="median stream tok/s (predicted)"),
            color=colour,
            tooltip=["workload", alt.Tooltip("requests_per_min:Q", format=".1f"),
                     alt.Tooltip("predicted_median_tok_s:Q", format=".1f")],
        )
    )  # fmt: skip
    layers = [line]
    threshold = pd.DataFrame({"threshold_tok_s": [t]})
    layers.append(
        alt.Chart(threshold)
        .mark_rule(strokeDash=[4, 3], color="#333333")
        .encode(y="threshold_tok_s:Q")
    )
    if not caps.empty:
        layers.append(
            alt.Chart(caps)
            .mark_rule()
            .encode(
                x="open_loop_requests_per_min:Q",
                color=colour,
                tooltip=["workload", alt.Tooltip("open_loop_requests_per_min:Q", format=".1f"),
                         "ratio_to_little", "burst_capacity_streams"],
            )
        )  # fmt: skip
    replays = data.get("open_loop_replays", pd.DataFrame())
    if not replays.empty:
        layers.append(
            alt.Chart(replays)
            .mark_point(filled=True, size=60)
            .encode(
                x="requests_per_min:Q",
                y="measured_median_tok_s:Q",
                color=colour,
                shape=alt.Shape("verdict:N", title="replay verdict"),
                tooltip=["workload", "rate_factor", "verdict",
                         alt.Tooltip("measured_median_tok_s:Q", format=".1f")],
            )
        )  # fmt: skip
    return _per_deployment(
        alt.layer(*layers),
        alt.TitleParams(
            "Open-loop capacity: predicted median stream rate against arrival rate",
            subtitle="rules: each workload's lambda*; dashed: the threshold; points: "
            "replays, measured",
        ),
        width=240,
        data=curve,
    ).resolve_scale(x="independent")


def replay_concurrency_chart(data: dict[str, Any]) -> Any:
    """Streams in flight second by second through each open-loop replay, beside the streams
    the plan offered at that rate (the dashed line, Little's law): a plan that holds stays
    near its line; one that fails climbs away from it, its slower streams staying longer."""
    c = data["replay_concurrency"].copy()
    c["replay"] = c.apply(lambda r: f"{r['rate_factor']:g}× (seed {int(r['seed'])})", axis=1)
    base = alt.Chart(c).encode(x=alt.X("t_s:Q", title="seconds into the replay"))
    flight = base.mark_line(interpolate="step-after").encode(
        y=alt.Y("streams_in_flight:Q", title="streams in flight"),
        color=alt.Color(
            "verdict:N",
            title="verdict",
            scale=alt.Scale(
                domain=["holds", "fails", "no verdict", "nothing measured"],
                range=["#1b7837", "#b2182b", "#999999", "#cccccc"],
            ),
        ),
        tooltip=["deployment", "replay", "t_s", "streams_in_flight", "verdict"],
    )
    offered = base.mark_rule(strokeDash=[4, 3], color="#333333").encode(
        y="mean(offered_streams):Q", tooltip=[alt.Tooltip("mean(offered_streams):Q", format=".1f")]
    )
    return _per_deployment(
        alt.layer(flight, offered, data=c),
        alt.TitleParams(
            "Streams in flight under open-loop arrivals",
            subtitle="dashed: the streams the plan offers at that rate (Little's law)",
        ),
        height=160,
        row="replay:N",
    )


def search_path_chart(data: dict[str, Any]) -> Any:
    """Where each search went: the concurrency it tried at each step (log 2), coloured by the
    verdict of record, sustain waves as diamonds; the tooltip holds the interval and why the
    level stopped."""
    sp = data["search_path"].copy()
    sp["label"] = sp["kind"].map({"level": "level", "sustain": "sustain wave"})
    verdicts = [v for v in VERDICT_COLORS if v in set(sp["verdict"])]
    levels = sorted({int(x) for x in sp["concurrency"].dropna()})
    base = alt.Chart(sp).encode(
        x=alt.X("search_step:O", title="step", axis=alt.Axis(labelAngle=0)),
        y=alt.Y(
            "concurrency:Q",
            title="concurrent streams",
            scale=alt.Scale(type="log", base=2),
            axis=alt.Axis(values=levels, format="d"),
        ),
    )
    path = base.mark_line(color="#999999").encode(detail="workload:N")
    points = base.mark_point(size=110, filled=True, stroke="black", strokeWidth=0.5).encode(
        color=alt.Color(
            "verdict:N",
            title="verdict",
            scale=alt.Scale(domain=verdicts, range=[VERDICT_COLORS[v] for v in verdicts]),
        ),
        shape=alt.Shape(
            "label:N",
            title=None,
            scale=alt.Scale(domain=["level", "sustain wave"], range=["circle", "diamond"]),
        ),
        tooltip=[
            "workload",
            "search_step",
            "kind",
            "concurrency",
            "n_trials",
            alt.Tooltip("median_decode_tok_s:Q", format=".1f"),
            alt.Tooltip("ci_low_tok_s:Q", format=".1f"),
            alt.Tooltip("ci_high_tok_s:Q", format=".1f"),
            "verdict",
            "stop_reason",
            "next_action",
        ],
    )
    return _per_deployment(
        alt.layer(path, points, data=sp),
        alt.TitleParams(
            "How each search went",
            subtitle="Doubling until a level fails, then bisection; a level takes trials "
            "until the interval of its median clears the threshold. Diamonds: sustain waves.",
        ),
        row="workload:N",
    )


def bound_chart(data: dict[str, Any]) -> Any:
    """The measured level medians beside the memory-bandwidth bound at each level's context
    (fct_level_bounds): how close to the physics each deployment runs."""
    frame = data["bounds"].dropna(subset=["bound_decode_tok_s"])
    long = pd.concat(
        [
            frame.assign(series="measured median", tok_s=frame["median_decode_tok_s"]),
            frame.assign(series="memory-bandwidth bound", tok_s=frame["bound_decode_tok_s"]),
        ]
    )
    long = long.assign(
        line=long["workload"] + " · " + long["series"],
        threshold_tok_s=long["threshold_tok_s"].astype(float),
    )
    lines = (
        alt.Chart()
        .mark_line(point=True)
        .encode(
            x=_concurrency_axis(long),
            y=alt.Y("tok_s:Q", title="tok/s per stream", scale=alt.Scale(type="log")),
            color=_workload_color(long),
            strokeDash=alt.StrokeDash("series:N", title=""),
            detail="line:N",
            tooltip=[
                "deployment",
                "workload",
                "concurrency",
                "series",
                alt.Tooltip("tok_s:Q", format=".1f"),
                alt.Tooltip("share_of_bound:Q", format=".0%", title="share of the bound"),
            ],
        )
    )
    rule = (
        alt.Chart().mark_rule(strokeDash=[2, 2], color="#555").encode(y="mean(threshold_tok_s):Q")
    )
    return _per_deployment(
        alt.layer(lines, rule, data=long),
        alt.Title(
            "Why this capacity: measured vs the memory-bandwidth bound",
            subtitle="Dashed: what the memory allows each stream at the level's context; "
            "the rule: the threshold",
        ),
    )


def _rung_lines(
    rungs: pd.DataFrame, columns: dict[str, str], axis: tuple[str, str, str, str]
) -> Any:
    """One line per deployment and series over the ladder's prompt sizes: ``columns`` (a
    column → its series' name) in long form; ``axis``: the series' field, the value's field,
    the value axis' title and its tooltip format."""
    label, value, title, fmt = axis
    frame = _long_form(rungs, ["deployment", "cold_prompt_tokens"], columns, label, value)
    frame["series"] = frame["deployment"] + ": " + frame[label]
    return (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("cold_prompt_tokens:Q", title="prompt tokens (usage)"),
            y=alt.Y(f"{value}:Q", title=title),
            color=alt.Color("series:N", title=None),
            tooltip=[
                "deployment",
                label,
                "cold_prompt_tokens",
                alt.Tooltip(f"{value}:Q", format=fmt),
            ],
        )
    )


def context_ladder_chart(data: dict[str, Any]) -> Any:
    """TTFT against prompt size, cold and warm, with the ceiling as a rule; below it what each
    cold prefill did to the background streams' decode rate (during it and outside)."""
    rungs = data["ladder_rungs"]
    rungs = rungs[rungs["cold_prompt_tokens"].notna()]
    lines = _rung_lines(
        rungs,
        {"cold_ttft_s": "cold (new document)", "warm_ttft_s": "warm (same document)"},
        ("case", "ttft_s", "time to first token (s)", ".2f"),
    )
    ceiling = pd.DataFrame({"ttft_ceiling_s": [float(rungs["ttft_ceiling_s"].max())]})
    rule = (
        alt.Chart(ceiling)
        .mark_rule(strokeDash=[4, 4], color="#b00")
        .encode(
            y="ttft_ceiling_s:Q", tooltip=[alt.Tooltip("ttft_ceiling_s:Q", title="ceiling (s)")]
        )
    )
    decode = _rung_lines(
        rungs,
        {
            "background_prefill_tok_s": "during the cold prefill",
            "background_outside_tok_s": "outside prefills",
        },
        ("window", "tok_s", "background decode (tok/s per stream)", ".1f"),
    ).properties(width=520, height=160)
    return alt.vconcat(
        (lines + rule).properties(
            width=520,
            height=220,
            title=alt.TitleParams(
                "Context ladder: time to first token by prompt size",
                subtitle="dashed red: the TTFT ceiling (dbt var ttft_ceiling_s)",
            ),
        ),
        decode,
    ).resolve_scale(color="independent")
