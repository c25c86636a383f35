"""What sparkcap prints, as text: the consoles every line goes through, the words for a
capacity (once, for the CLI, the night's gaps and the Prefect artifact) and the table, CSV and
JSON forms of levels, fleet capacities, comparisons and ad-hoc SQL.

Nothing here reads the warehouse or judges a number: the rows come from
:mod:`sparkcap.publish.marts` and every verdict is the mart's (``fct_capacity.capacity_verdict``
words each case in dbt). Kept free of DuckDB and pandas at import, so that ``sparkcap --help``
can print through these consoles without loading the warehouse.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

from rich import box
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    import pandas as pd

    from sparkcap.dq.validate import ValidationResult
    from sparkcap.publish.compare import Regression
    from sparkcap.publish.marts import (
        BottleneckRow,
        CapacityRow,
        ChangeRow,
        ContextLadderRow,
        FailedStep,
        FleetRow,
        LevelRow,
        LinkRow,
        OpenLoopRow,
        PlanRatesRow,
        PlanRoutingRow,
        PlanRow,
        QueryResult,
        RecordedRun,
        ReplayFleetRow,
        ReplayRow,
        SearchDisagreement,
        SessionCacheRow,
    )

OutputFormat = Literal["table", "csv", "json"]

# C0 and C1 control characters but tab and newline: an escape sequence in a server's model id
# or error text would otherwise drive the terminal (clear it, retitle it, hide what follows)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with every control character spelled out (``\x1b``), so it prints as text."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class _TextConsole(Console):
    def print(self, *objects: Any, **options: Any) -> None:
        super().print(*(visible(o) if isinstance(o, str) else o for o in objects), **options)


def text_console(**options: Any) -> Console:
    """A Rich console that prints every string as text, never as markup: model ids, SQL cells,
    file names and error messages come from users, files and servers, and a ``[/oops]`` or
    ``[rank0]`` in them must neither raise nor vanish, nor an escape sequence reach the
    terminal (:func:`visible`). Every console sparkcap prints through is made here."""
    return _TextConsole(markup=False, highlight=False, **options)


# --- the words for a capacity ------------------------------------------------------------------


def search_disagreement_words(d: SearchDisagreement) -> str:
    """The line a sweep prints at once where its live search decided a step otherwise than
    the record: the user learns that the path taken is not the one of record, and why."""
    why = "; ".join(x for x in (d.verdict_reason, d.invalid_reasons) if x)
    return (
        f"note: {d.deployment}/{d.workload} search {d.kind} at {d.concurrency} streams was "
        f"decided live as {d.live_verdict or 'undecided'}; the record says {d.verdict}"
        + (f" ({why})" if why else "")
    )


def capacity_words(c: CapacityRow, *, failing: bool = False) -> str:
    """A deployment × workload's capacity as every reader words it: ``dep/wl: verdict``, the
    verdict being the mart's (a pair that measured nothing reads "no valid measurement at level
    N: why", never "below the threshold" or a bare 0). ``failing``: the line a sweep or night
    ends on, which says first that such a pair measured nothing."""
    pair = f"{c.deployment}/{c.workload}"
    if failing and not c.is_measured:
        return f"{pair} measured nothing: {c.capacity_verdict}"
    return f"{pair}: {c.capacity_verdict}"


def capacity_line(c: CapacityRow) -> str:
    return f"capacity at {c.threshold_tok_s:g} tok/s — {capacity_words(c)}"


BOTTLENECK_WORDS = {
    "client": "the client",
    "link": "a link",
    "kv-cache": "KV-cache capacity (preemption)",
    "request-slots": "request slots (queueing)",
    "batch-buckets": "batch-size buckets (a dip)",
    "prefill": "prefill interference",
    "memory-bandwidth": "memory bandwidth",
}


def bottleneck_line(b: BottleneckRow) -> str | None:
    """The line printed under a capacity: what limits it, how sure, on what evidence, and
    the advice the evidence supports; None where the capacity's own words say it all (not
    reached, not measured)."""
    if b.bottleneck in ("not reached", "not measured"):
        return None
    pair = f"{b.deployment}/{b.workload}"
    if b.bottleneck == "unknown":
        line = f"  why {pair}: unknown — no signal at {b.limit_level} streams decides"
    else:
        what = BOTTLENECK_WORDS.get(b.bottleneck, b.bottleneck)
        if b.is_confirmed is False:
            # only a setting points here: the mart's evidence reads "consistent with …"
            what += ", unconfirmed"
        line = f"  why {pair}: {what} ({b.confidence}) — {b.evidence}"
        if b.advice:
            line += f"; advice: {b.advice}"
    if b.bound_flags:
        line += f"; check: {b.bound_flags}"
    if b.overruled_evidence:
        line += f"; overruled by the measurements: {b.overruled_evidence}"
    return visible(line)


def session_cache_lines(rows: Sequence[SessionCacheRow]) -> list[str]:
    """One line per deployment's agent waves: the cache state they found (and the reset's
    verdict), then one line per wave whose cache was not what its plan assumed."""
    out: list[str] = []
    by_dep: dict[str, list[SessionCacheRow]] = {}
    for r in rows:
        by_dep.setdefault(r.deployment, []).append(r)
    for dep, waves in by_dep.items():
        states = sorted({w.cache_state or "nothing to judge" for w in waves})
        resets = sorted({w.reset_verdict for w in waves if w.reset_verdict})
        line = f"  sessions' cache {dep}/agent: {', '.join(states)} over {len(waves)} wave(s)"
        if resets:
            line += f"; cache reset: {', '.join(resets)}"
        out.append(visible(line))
        out.extend(
            visible(
                f"  flagged {dep}/agent {w.concurrent_sessions} session(s) trial {w.trial}: "
                f"{w.flag_reason}"
            )
            for w in waves
            if w.is_flagged
        )
    return out


def fleet_headline(workloads: Sequence[tuple[str, int]]) -> str:
    """The measured workloads' fleet capacities as the report's headline and its chart say
    them, "≈ 28 code streams or ≈ 11 prose streams" (agent levels count sessions): alternative
    workloads, never a sum. A workload no deployment measured is named apart by the caller."""
    return " or ".join(
        f"≈ {n} {'agent sessions' if w == 'agent' else f'{w} streams'}" for w, n in workloads
    )


def fleet_line(f: FleetRow) -> str:
    """The fleet's capacity for a workload, with what it rests on: replicas counted from one
    measured replica, deployments that measured nothing (the sum is then partial)."""
    head = f"fleet capacity at {f.threshold_tok_s:g} tok/s — {f.workload}: "
    if f.n_measured_deployments == 0:
        # nothing measured is never printed as a capacity of 0
        return head + f"not measured ({f.not_measured_deployments or 'no deployment measured'})"
    note = ""
    if f.extrapolated_deployments:
        note += f" (replicas extrapolated: {f.extrapolated_deployments})"
    if f.not_measured_deployments:
        note += f" (partial: {f.not_measured_deployments} not measured)"
    # streams keep their plural (scripts parse "N streams"); sessions are new: worded right
    unit = (
        ("session" if f.capacity_streams == 1 else "sessions")
        if f.workload == "agent"
        else "streams"
    )
    return head + f"{f.capacity_streams} {unit}{note}"


def step_gap_words(s: FailedStep) -> str:
    return f"{s.deployment or 'night'} {s.outcome}: {s.reason or 'no reason recorded'}"


def link_state(healthy: bool, achieved_gbps: float | None) -> str:
    """A link's state in one word, wherever it is shown: ``ok``, ``UNHEALTHY`` (below the
    fleet's share of nominal) or ``FAILED`` (nothing measured)."""
    if healthy:
        return "ok"
    return "FAILED" if achieved_gbps is None or achieved_gbps != achieved_gbps else "UNHEALTHY"


def thin_tail_words(n_samples: int, min_samples: int | None) -> str:
    """A tail quantile over fewer samples than support it (dbt macro tail_min_samples), in
    words wherever it is shown: no figure."""
    return f"not enough samples ({n_samples} of {'?' if min_samples is None else min_samples})"


def link_line(k: LinkRow) -> str:
    """A link's achieved against nominal Gb/s and dbt's verdict (:func:`link_state`), with the
    probe's error where it has one."""
    got = "—" if k.achieved_gbps is None else f"{k.achieved_gbps:.2f} Gb/s"
    state = link_state(k.healthy, k.achieved_gbps)
    why = f" ({k.error})" if k.error else ""
    return f"{k.deployment}/{k.link}: {got} of {k.nominal_gbps:g} nominal — {state}{why}"


def context_ladder_line(c: ContextLadderRow) -> str:
    """A context ladder's answer in one line: the largest prompt whose first token came within
    the ceiling (cold, then warm), where the ladder stopped meeting it and why, the context
    it climbed to and who reported it."""
    head = f"{c.deployment} context ladder"
    if c.status != "measured":
        return f"{head}: unavailable ({c.status_reason or 'no reason recorded'})"
    ceiling = f"TTFT ≤ {c.ttft_ceiling_s:g} s"

    def tokens(n: int | None) -> str:
        return "none" if n is None else f"{n:,} tokens"

    if c.limited_by == "ttft":
        stop = f"slower from the {c.first_failing_rung:,}-token rung"
    elif c.limited_by == "context":
        stop = f"refused from the {c.refused_rung_tokens:,}-token rung (the context limit)"
    else:
        stop = "every rung met it"
    context = (
        "no context reported"
        if c.context_tokens is None
        else f"context {c.context_tokens:,} ({c.context_source})"
    )
    # a rung whose cold prompt the server served from its cache measured no cold prefill
    not_cold = (
        f"; {c.n_not_cold_rungs} rung(s) served from the cache, not counted as cold"
        if c.n_not_cold_rungs
        else ""
    )
    return (
        f"{head}: largest prompt with {ceiling}: {tokens(c.largest_cold_prompt_tokens)} cold, "
        f"{tokens(c.largest_warm_prompt_tokens)} warm; {stop}; {context}{not_cold}"
    )


_MARKDOWN_ESCAPES = str.maketrans(
    {
        "\\": "\\\\",
        "|": "\\|",
        "\n": " ",
        "\r": " ",
        # a server's text (a model's `root`, an error) is text: no HTML (a comment hides the
        # rest of the artifact, a <script> or <img> runs or loads), no link or image (an
        # image is a beacon that loads when the artifact is opened), no code span
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
        "[": "\\[",
        "]": "\\]",
        "`": "\\`",
    }
)


def markdown_cell(text: str) -> str:
    """A verdict quotes recorded reasons, and those quote servers: as a table cell a ``|`` or
    a line break must not end the cell or the row, and Markdown or HTML in them must render as
    the characters they are."""
    return text.translate(_MARKDOWN_ESCAPES)


def capacity_markdown(run_id: str, fleet: Sequence[FleetRow], caps: Sequence[CapacityRow]) -> str:
    """The capacity table published as a Prefect artifact: the fleet's lines as the CLI prints
    them, then one row per deployment × workload with the mart's verdict."""
    lines = [f"# sparkcap run {run_id}", ""]
    lines += [f"- {markdown_cell(fleet_line(f))}" for f in fleet]
    lines += [
        "",
        "| deployment | workload | capacity | interpolated | first failing | "
        "lower bound | valid trials | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in caps:
        failing = "—" if c.first_failing_level is None else c.first_failing_level
        lines.append(
            f"| {c.deployment} | {c.workload} | {c.capacity_streams} | "
            f"{c.capacity_interpolated_streams} | {failing} | "
            f"{'yes' if c.is_lower_bound else 'no'} | {c.n_valid_trials} | "
            f"{markdown_cell(visible(c.capacity_verdict))} |"
        )
    return "\n".join(lines)


def change_subject_words(ch: ChangeRow) -> str:
    if ch.subject == "level" and ch.concurrency is not None:
        return f"rate at {ch.concurrency} streams"
    return ch.subject


def change_line(ch: ChangeRow) -> str:
    """A flagged change as a night prints it under its capacities: the pair and what
    changed, its size against the baseline, the test's p-value, and what else changed that
    night (the likely cause) as ``fct_changes`` words it; the verdict is the mart's."""
    size = "" if ch.change_pct is None else f" {ch.change_pct:+.1f} %"
    facts = [] if ch.p_value is None else [f"p {ch.p_value:.2g}"]
    if ch.baseline_value is not None:
        band = ""
        if ch.baseline_low is not None and ch.baseline_high is not None:
            band = f" [{ch.baseline_low:.4g}, {ch.baseline_high:.4g}]"
        runs = "" if ch.n_baseline_runs is None else f" of {ch.n_baseline_runs} runs"
        facts.append(f"baseline {ch.baseline_value:.4g}{band}{runs}")
    line = f"change vs baseline — {ch.deployment}/{ch.workload} {change_subject_words(ch)}:{size}"
    if facts:
        line += f" ({'; '.join(facts)})"
    if ch.verdict:
        line += f" — {ch.verdict}"
    if ch.what_else_changed and ch.what_else_changed not in (ch.verdict or ""):
        line += f"; also changed: {ch.what_else_changed}"  # the verdict may say it already
    return visible(line)


def change_lines(changes: Sequence[ChangeRow]) -> list[str]:
    """What a night prints of its comparison with the baseline: one line per flagged change,
    one "no change" line when every comparison held, nothing when there was none (no
    baseline yet, or a warehouse without ``fct_changes``)."""
    flagged = [ch for ch in changes if ch.is_change]
    if flagged:
        return [change_line(ch) for ch in flagged]
    tested = [ch for ch in changes if ch.is_tested]
    if tested:
        return [f"no change vs baseline ({len(tested)} comparison(s))"]
    return []  # no baseline yet: nothing was compared, so nothing is said


def changes_markdown(run_id: str, changes: Sequence[ChangeRow]) -> str:
    """The change list published as a Prefect artifact beside the capacity table: each
    flagged change as a row, or one line saying none was (or that there was no baseline)."""
    lines = [f"# Changes vs baseline, run {run_id}", ""]
    flagged = [ch for ch in changes if ch.is_change]
    tested = [ch for ch in changes if ch.is_tested]
    if not tested and not flagged:
        return "\n".join([*lines, "No baseline to compare with yet."])
    if not flagged:
        return "\n".join([*lines, f"No change vs baseline ({len(tested)} comparison(s))."])
    lines += [
        "| deployment | workload | subject | change | p | baseline | also changed | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for ch in flagged:
        pct = "—" if ch.change_pct is None else f"{ch.change_pct:+.1f} %"
        p = "—" if ch.p_value is None else f"{ch.p_value:.2g}"
        base = "—" if ch.baseline_value is None else f"{ch.baseline_value:.4g}"
        cells = (
            ch.deployment,
            ch.workload,
            change_subject_words(ch),
            pct,
            p,
            base,
            ch.what_else_changed or "—",
            ch.verdict or "—",
        )
        lines.append("| " + " | ".join(markdown_cell(visible(c)) for c in cells) + " |")
    return "\n".join(lines)


def regression_line(r: Regression) -> str:
    return visible(f"regression: {r.deployment}/{r.workload} {r.words}")


def interrupted_line(run_id: str, recorded: RecordedRun | None) -> str:
    """What a Ctrl-C leaves, for its one error line: the run as recorded and the waves staged
    before it (kept; the wave in flight is no measurement), that nothing was recorded, or
    (``recorded`` None: the warehouse could not be read) only what is certain."""
    if recorded is None:
        return f"interrupted (Ctrl-C): run {run_id} stopped; the waves it staged are kept"
    if recorded.status is None:
        return "interrupted (Ctrl-C) before the run started; nothing was recorded"
    n = recorded.n_waves
    if recorded.status == "complete":  # after the sweep: building or reporting was cut short
        return (
            f"interrupted (Ctrl-C) after the sweep: run {run_id} and its {n} wave(s) are "
            "recorded (`sparkcap build`, then `sparkcap report`, finish it)"
        )
    return (
        f"interrupted (Ctrl-C): run {run_id} is marked {recorded.status}; its {n} staged "
        "wave(s) are kept (`sparkcap build` builds them)"
    )


# --- levels, comparisons and SQL as tables, CSV and JSON ------------------------------------------


def _figure(x: float | None, digits: int = 1) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def levels_table(run_id: str, levels: Sequence[LevelRow]) -> Table:
    """Short headers with units and light borders: readable at 80 columns. Agent levels are
    judged on the turns' TTFT at a quantile, not the median: when the run has any, a column
    shows that figure (and '>' where it is over the ceiling)."""
    quantiles = {lv.ttft_quantile for lv in levels if lv.ttft_quantile is not None}
    table = Table(title=f"run {run_id}", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0))
    columns = [
        ("deployment", "left"),
        ("workload", "left"),
        ("streams", "right"),
        ("valid", "right"),
        ("med tok/s", "right"),
        ("min tok/s", "right"),
        ("TTFT s", "right"),
    ]
    if quantiles:
        # one quantile per build (a dbt var): its name, else the generic word
        q = next(iter(quantiles)) if len(quantiles) == 1 else None
        columns.append((f"TTFT p{q * 100:g} s" if q is not None else "TTFT q s", "right"))
    columns += [("failed", "right"), ("queued", "left")]
    for col, justify in columns:
        table.add_column(col, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for lv in levels:
        cells = [
            lv.deployment,
            lv.workload,
            str(lv.concurrency),
            f"{lv.n_valid_trials}/{lv.n_trials}",
            _figure(lv.median_decode_tok_s),
            _figure(lv.min_decode_tok_s),
            _figure(lv.median_ttft_s, 2),
        ]
        if quantiles:
            cells.append(_quantile_ttft_cell(lv))
        cells += [str(lv.n_failed_streams), "yes" if lv.any_queued else ""]
        table.add_row(*cells)
    return table


def _quantile_ttft_cell(lv: LevelRow) -> str:
    if lv.ttft_ceiling_s is None:
        return ""  # a code or prose level: its rule reads no TTFT
    # the mart's verdict on the ceiling, not a comparison of its own
    over = f" > {lv.ttft_ceiling_s:g}" if lv.meets_ttft_ceiling is False else ""
    if lv.ttft_quantile_s is not None and lv.ttft_quantile_is_supported is not True:
        # a tail over fewer samples than support it is no figure (dbt macro tail_min_samples)
        return thin_tail_words(lv.ttft_quantile_samples or 0, lv.ttft_quantile_min_samples) + over
    return _figure(lv.ttft_quantile_s, 2) + over


# the levels output's columns: marts.LevelRow's fields (a unit test keeps them equal), named
# here too so that an empty run's CSV still has its header
LEVEL_COLUMNS = (
    "deployment",
    "workload",
    "concurrency",
    "n_valid_trials",
    "n_trials",
    "median_decode_tok_s",
    "min_decode_tok_s",
    "median_ttft_s",
    "ttft_quantile",
    "ttft_quantile_s",
    "ttft_ceiling_s",
    "meets_ttft_ceiling",
    "ttft_quantile_samples",
    "ttft_quantile_min_samples",
    "ttft_quantile_is_supported",
    "n_failed_streams",
    "any_queued",
)
# what the CLI's levels output carries of each capacity (the rest of the row is the report's)
CAPACITY_COLUMNS = (
    "deployment",
    "workload",
    "threshold_tok_s",
    "capacity_streams",
    "is_lower_bound",
    "is_below_lowest_level",
    "first_failing_level",
    "method",
    "level_capacity_streams",
    "search_low_streams",
    "search_high_streams",
    "n_straddling_levels",
    "sustain_result",
    "is_measured",
    "capacity_verdict",
)


def print_levels(
    console: Console,
    stream: TextIO,
    run_id: str,
    levels: Sequence[LevelRow],
    caps: Sequence[CapacityRow],
    fmt: OutputFormat = "table",
    why: Sequence[BottleneckRow] = (),
) -> None:
    """A run's levels and capacities: a table and one line per capacity on ``console``, or
    for scripts only the data on ``stream``: JSON (both tables) or CSV (one row per level,
    with its deployment × workload's capacity)."""
    if fmt == "table":
        console.print(levels_table(run_id, levels))
        why_by_pair = {(b.deployment, b.workload): b for b in why}
        for c in caps:
            console.print(capacity_line(c), highlight=False)
            b = why_by_pair.get((c.deployment, c.workload))
            line = None if b is None else bottleneck_line(b)
            if line is not None:
                console.print(line, highlight=False)
        return
    lv = [{k: getattr(row, k) for k in LEVEL_COLUMNS} for row in levels]
    cs = [{k: getattr(c, k) for k in CAPACITY_COLUMNS} for c in caps]
    if fmt == "json":
        doc = {"run_id": run_id, "levels": lv, "capacity": cs}
        stream.write(json.dumps(doc, default=float) + "\n")
        return
    by_pair = {(c["deployment"], c["workload"]): c for c in cs}
    w = csv.writer(stream)
    extra = ("threshold_tok_s", "capacity_streams", "is_lower_bound", "capacity_verdict")
    w.writerow(["run_id", *LEVEL_COLUMNS, *extra])
    for row in lv:
        cap = by_pair.get((row["deployment"], row["workload"]), {})
        w.writerow([run_id, *row.values(), *(cap.get(k) for k in extra)])


def print_rows(console: Console, stream: TextIO, result: QueryResult, fmt: OutputFormat) -> None:
    """Rows of ad-hoc SQL: a table of text (NULL spelled out, control characters shown), or
    CSV or JSON (any value JSON lacks, such as a date or a DECIMAL, as its text)."""
    if fmt == "csv":
        w = csv.writer(stream)
        w.writerow(result.columns)
        w.writerows(result.rows)
    elif fmt == "json":
        doc = [dict(zip(result.columns, r, strict=True)) for r in result.rows]
        stream.write(json.dumps(doc, default=str) + "\n")
    else:
        table = Table()
        for c in result.columns:
            table.add_column(c)
        for r in result.rows:
            table.add_row(*("NULL" if v is None else visible(str(v)) for v in r))
        console.print(table)


def _cell(v: Any) -> str:
    if v is None or (isinstance(v, float) and v != v):  # NaN: pandas' missing value
        return "—"
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def print_frames(
    console: Console,
    stream: TextIO,
    frames: Mapping[str, pd.DataFrame],
    before: str,
    after: str,
    fmt: OutputFormat,
) -> None:
    """A comparison's frames: one table each, CSV (a ``# name`` line before each block) or
    one JSON document."""
    if fmt == "json":
        doc = {n: json.loads(f.to_json(orient="records")) for n, f in frames.items()}
        stream.write(json.dumps({"before": before, "after": after, **doc}) + "\n")
        return
    if fmt == "csv":
        for name, frame in frames.items():
            stream.write(f"# {name}\n")
            frame.to_csv(stream, index=False)
        return
    for name, frame in frames.items():
        table = Table(title=f"{name.replace('_', ' ')}: {before} → {after}")
        for c in frame.columns:
            table.add_column(c)
        for row in frame.itertuples(index=False):
            table.add_row(*(_cell(v) for v in row))
        console.print(table)


# --- the end of a night or a validation ---------------------------------------------------


def night_lines(result: Mapping[str, Any], db_path: Path) -> list[str]:
    """Where a finished night's results are: the warehouse, the report (and its data docs when
    validation wrote them) and how to open it offline."""
    report = result["report"]
    lines = [f"database: {db_path}", f"report: {report}"]
    docs = Path(str(report)).parent / "dq" / "data_docs" / "index.html"
    if docs.exists():
        lines.append(f"data docs: {docs}")
    return [*lines, f"open it: python3 -m webbrowser file://{report} (no network needed)"]


def night_failures(result: Mapping[str, Any]) -> list[str]:
    """What a night that did not do its whole job ends on: each part not measured, then one
    ``error:`` line (an incomplete night before failed data quality); none for a whole one."""
    gaps = result.get("gaps") or []
    lines = [f"not measured — {gap}" for gap in gaps]
    if gaps or result.get("run_status", "complete") != "complete":
        why = (
            f"{len(gaps)} part(s) of the night missing (listed above and in the report)"
            if gaps
            else str(result["run_reason"])
        )
        return [*lines, f"error: run {result['run_id']} is incomplete: {why}"]
    if result.get("dq_success") is False:
        return [f"error: data-quality failed: {', '.join(result['dq_failed'])}"]
    return []


def validation_lines(result: ValidationResult) -> list[str]:
    """A run's data quality, one line per expectation (``ok``, ``warn`` or a blocking
    ``FAIL`` with a few offending ids), then where its pages are."""
    lines = [f"run {result.run_id}"]
    for o in result.outcomes:
        mark = "ok  " if o.success else ("FAIL" if o.blocking else "warn")
        extra = ""
        if not o.success:
            extra = f" — {o.unexpected_count} offending, e.g. {', '.join(o.sample_ids[:3])}"
        lines.append(f"{mark} {o.suite}.{o.expectation}{extra}")
    if result.summary_page is not None:
        lines.append(f"summary: {result.summary_page}")
    if result.data_docs_index is not None:
        lines.append(f"data docs: {result.data_docs_index}")
    return lines


def plan_lines(plan: PlanRow) -> list[str]:
    """What fct_plan says, in the order a planner asks: how many, of what, what stops more,
    what is assumed rather than measured, and whether the long prompts fit."""
    mix = f"{plan.code_share:.0%} code / {1 - plan.code_share:.0%} prose"
    if plan.plan_verdict != "planned":
        return [f"plan for run {plan.run_id} ({mix}): {plan.plan_verdict}"]
    lines = [
        f"plan for run {plan.run_id} at {plan.threshold_tok_s:g} tok/s per stream, {mix}: "
        f"{plan.planned_streams} concurrent streams ({plan.planned_code_streams} code, "
        f"{plan.planned_prose_streams} prose)",
        f"  headroom: {plan.spare_code_streams} more code or {plan.spare_prose_streams} more "
        "prose streams in all, each alone; limited by: " + (plan.limited_by or "nothing named"),
    ]
    if plan.mixing_contradicted:
        lines.append("  mixing: the mixed probe failed where the plan mixes; see mixed basis")
    elif plan.assumes_additive_mixing:
        lines.append(
            "  mixing: assumed additive (capacity shares add) where the mixed probe did not "
            "measure it"
        )
    if plan.long_prompts_per_min:
        lines.append(
            f"  long prompts: {plan.long_prompts_per_min:g}/min of {plan.long_prompt_tokens} "
            f"tokens, decode below the threshold at most {plan.max_below_threshold_share:.0%} "
            f"of the time: {plan.prefill_verdict}"
        )
        if plan.prefill_not_measured_deployments:
            lines.append(
                "  no prefill budget (not measured, none assumed): "
                + plan.prefill_not_measured_deployments
            )
    return lines


def rate_plan_lines(run_id: str, threshold_tok_s: float, rows: Sequence[PlanRatesRow]) -> list[str]:
    """The plan in the unit a gateway enforces: requests a minute by open-loop capacity
    (fct_plan_rates), the fleet's total and the users it serves at the stated think time."""
    if not rows:
        return [f"rate plan for run {run_id}: not planned (no open-loop capacity)"]
    code = sum(r.code_per_min for r in rows)
    prose = sum(r.prose_per_min for r in rows)
    users = sum(r.users for r in rows)
    share = rows[0].code_share
    lines = [
        f"plan for run {run_id} at {threshold_tok_s:g} tok/s per stream, {share:.0%} code / "
        f"{1 - share:.0%} prose requests, users arriving independently:",
        f"  {code + prose:.0f} requests a minute ({code:.0f} code, {prose:.0f} prose): "
        f"{users:.0f} users at a {rows[0].think_time_s:g} s think time{_long_words(rows)}",
    ]
    unrouted = [f"{r.deployment} ({r.not_routed_reason})" for r in rows if r.not_routed_reason]
    if unrouted:
        lines.append("  not routed: " + ", ".join(unrouted))
    if any(r.mixes_workloads and (r.mixed_basis or "").startswith("assumed") for r in rows):
        lines.append("  mixing: assumed additive where the mixed probe did not measure it")
    return lines


def _narrow_table(
    title: str, columns: Sequence[tuple[str, str]], no_wrap: Sequence[str] = ("deployment",)
) -> Table:
    """A table readable at 80 columns: light borders, no padding beyond the box's own
    separators, a cell folded onto a second line rather than cut with an ellipsis."""
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0))
    for col, justify in columns:
        table.add_column(
            col,
            justify=justify,  # type: ignore[arg-type]
            overflow="fold",
            no_wrap=col in no_wrap,
        )
    return table


def rate_plan_headline(rows: Sequence[PlanRatesRow]) -> str | None:
    """The fleet's answer for users who arrive independently, beside the burst figures: the
    rate plan at the night's mix in requests a minute and users (None: no rate plan)."""
    if not rows:
        return None
    code = sum(r.code_per_min for r in rows)
    prose = sum(r.prose_per_min for r in rows)
    share = rows[0].code_share
    return (
        f"fleet under independent arrivals — {share:.0%} code / {1 - share:.0%} prose: "
        f"{code + prose:.0f} requests a minute ({code:.0f} code, {prose:.0f} prose), "
        f"{sum(r.users for r in rows):.0f} users at a {rows[0].think_time_s:g} s think time"
        f"{_long_words(rows)} (sparkcap plan)"
    )


def _long_words(rows: Sequence[PlanRatesRow]) -> str:
    """The long prompts the plan routes beside the requests: their prefills are reserved out
    of each deployment's decode (the open-loop capacity is lower by the time they stall)."""
    long_per_min = sum(r.long_prompts_per_min or 0.0 for r in rows)
    if long_per_min <= 0:
        return ""
    return f", beside {long_per_min:.2g} long prompts a minute (their prefills reserved)"


def rate_plan_table(run_id: str, rows: Sequence[PlanRatesRow]) -> Table:
    """Per deployment: requests a minute routed, its open-loop capacity per replica alone
    (code/prose), the share of its line used, the users, the long prompts; 80 columns."""
    table = _narrow_table(
        f"rate plan (requests a minute), run {run_id}",
        [
            ("deployment", "left"),
            ("code", "right"),
            ("prose", "right"),
            ("cap c/p", "right"),
            ("line", "right"),
            ("users", "right"),
            ("long", "right"),
            ("mixing", "left"),
        ],
    )
    for r in rows:
        replicas = f" ×{r.replicas}" if r.replicas > 1 else ""
        table.add_row(
            r.deployment + replicas,
            f"{r.code_per_min:.1f}",
            f"{r.prose_per_min:.1f}",
            f"{_per_min(r.code_capacity_per_min)}/{_per_min(r.prose_capacity_per_min)}",
            f"{r.line_share_used:.0%}",
            f"{r.users:.0f}",
            f"{r.long_prompts_per_min or 0:.2f}",
            _mixing_word(r.mixed_basis) if r.mixes_workloads else "—",
        )
    return table


def _per_min(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}"


def open_loop_lines(rows: Sequence[OpenLoopRow]) -> list[str]:
    """Each workload's open-loop capacity beside its burst figure, in words."""
    lines = []
    for r in rows:
        name = f"{r.deployment}/{r.workload}"
        if r.open_loop_arrivals_per_s is None:
            lines.append(f"open-loop capacity — {name}: {r.not_predicted_reason}")
            continue
        little = (
            f", {r.ratio_to_little:.2f}× the burst capacity's Little rate"
            if r.ratio_to_little is not None
            else ""
        )
        lines.append(
            f"open-loop capacity — {name}: {r.open_loop_requests_per_min:.1f} requests/min"
            f"{little}; {r.mean_in_flight:.1f} in flight (p95 {r.p95_in_flight}), median "
            f"{r.predicted_median_tok_s:.1f} tok/s, then limited by {r.limited_by}"
            + (" (past the tested levels)" if r.is_extrapolated else "")
        )
    return lines


def plan_table(run_id: str, rows: Sequence[PlanRoutingRow]) -> Table:
    """The burst plan's routing, readable at 80 columns: what limits a replica without the
    "at capacity:" preamble, the mixing basis by its first word (the whole of it is in
    fct_plan_routing and the report)."""
    table = _narrow_table(
        f"routing (streams), run {run_id}",
        [
            ("deployment", "left"),
            ("code", "right"),
            ("prose", "right"),
            ("cap c/p", "right"),
            ("used", "right"),
            ("spare", "right"),
            ("budget", "right"),
            ("long", "right"),
            ("limited by", "left"),
            ("mixing", "left"),
        ],
        no_wrap=("deployment", "limited by"),
    )
    for r in rows:
        if r.prefill_budget_is_unbounded:
            budget = "any"
        elif r.prefill_budget_per_min is None:
            budget = "n/m"
        else:
            budget = f"{r.prefill_budget_per_min:.2f}"
        replicas = f" ×{r.replicas}" if r.replicas > 1 else ""
        table.add_row(
            r.deployment + replicas,
            str(r.code_streams),
            str(r.prose_streams),
            f"{r.code_capacity_streams}/{r.prose_capacity_streams}",
            f"{r.capacity_share_used:.0%}",
            f"{r.spare_code_streams}/{r.spare_prose_streams}",
            budget,
            f"{r.long_prompts_per_min:.2f}",
            r.limited_by.removeprefix("at capacity: "),
            _mixing_word(r.mixed_basis),
        )
    return table


def _mixing_word(basis: str | None) -> str:
    """A mixing basis by its first word ("assumed", "measured", "contradicted"); a replica
    with one workload does not mix."""
    if not basis or basis.startswith("one workload"):
        return "—"
    return basis.split(":")[0]


def replay_lines(
    run_id: str,
    fleet: ReplayFleetRow | None,
    rows: Sequence[ReplayRow],
    failed: dict[str, str],
) -> list[str]:
    """The fleet's verdict under open-loop arrivals first, then each deployment's in words."""
    if fleet is None:
        lines = [f"open-loop replay of run {run_id}: nothing recorded"]
    else:
        kind = next((r.plan_kind for r in rows if r.plan_kind), None)
        plan = {"rate": "the rate plan's", "burst": "the burst plan's"}.get(
            kind or "", "the plan's"
        )
        lines = [
            f"open-loop replay of run {run_id} at {fleet.rate_factor:g}× {plan} arrivals "
            f"(seed {fleet.seed}): the plan {fleet.plan_verdict}"
            f" ({fleet.n_holding} of {fleet.n_deployments} deployments hold)"
        ]
    for r in rows:
        lines.append(f"  {r.deployment}: {r.verdict_text}")
        if r.model_note:
            lines.append(f"    {r.model_note}")
    shown = {r.deployment for r in rows}
    for name, why in sorted(failed.items()):
        if name not in shown:  # its own row says so once staged
            lines.append(f"  {name}: not replayed: {why}")
    return lines


def _prefill_below(r: ReplayRow) -> str:
    """The share of the replay's time decode spent below the threshold beside its long
    prefills (what the plan's prefill budget allows a share of), and of how many prompts."""
    if r.n_long_prefills == 0 or r.prefill_below_threshold_share is None:
        return "—"
    return f"{r.prefill_below_threshold_share:.1%} ({r.n_long_prefills_below}/{r.n_long_prefills})"


def replay_table(run_id: str, rows: Sequence[ReplayRow]) -> Table:
    """Measured beside predicted (the open-loop model's figure for the offer, after the
    slash), the TTFT p90 from the scheduled start (a client that fell behind shows there), the
    requests sent late and the prefill budget's share; readable at 80 columns (a cell wraps,
    never cut). A p90 over too few samples is no figure."""
    table = _narrow_table(
        f"replay, run {run_id}: streams in flight and median tok/s, measured/predicted",
        [
            ("deployment", "left"),
            ("flight", "right"),
            ("code", "right"),
            ("prose", "right"),
            ("TTFT90", "right"),
            ("late", "right"),
            ("prefill", "right"),
            ("verdict", "left"),
        ],
    )
    for r in rows:
        if r.verdict == "not replayed":  # nothing was sent: no figure, its reason above
            table.add_row(r.deployment, *["—"] * 6, r.verdict)
            continue
        p90 = (
            _figure(r.ttft_scheduled_p90_s, 2)
            if r.ttft_p90_is_supported
            else (f"few ({r.ttft_samples})")
        )
        table.add_row(
            r.deployment,
            _pair(r.mean_streams_in_flight, r.predicted_mean_in_flight),
            _pair(r.code_median_decode_tok_s, r.predicted_code_median_tok_s),
            _pair(r.prose_median_decode_tok_s, r.predicted_prose_median_tok_s),
            p90,
            f"{r.n_sent_late} · {_figure(r.max_send_lag_s, 2)}",
            _prefill_below(r),
            r.verdict,
        )
    return table


def _pair(measured: float | None, predicted: float | None) -> str:
    if measured is None and predicted is None:
        return "—"
    return f"{_figure(measured)}/{_figure(predicted)}"
