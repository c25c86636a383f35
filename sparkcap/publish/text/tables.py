"""Levels, capacities, comparisons and ad-hoc SQL as tables, CSV and JSON, and the table
every 80-column view is drawn in."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TextIO

from rich import box
from rich.console import Console
from rich.table import Table

from sparkcap.publish.text.capacity import bottleneck_line, capacity_line
from sparkcap.publish.text.console import visible

if TYPE_CHECKING:
    import pandas as pd

    from sparkcap.publish.marts import BottleneckRow, CapacityRow, LevelRow, QueryResult


OutputFormat = Literal["table", "csv", "json"]


def figure(x: float | None, digits: int = 1) -> str:
    """A figure to ``digits`` decimals, a dash where there is none."""
    return "—" if x is None else f"{x:.{digits}f}"


def narrow_table(
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


def thin_tail_words(n_samples: int, min_samples: int | None) -> str:
    """A tail quantile over fewer samples than support it (dbt macro tail_min_samples), in
    words wherever it is shown: no figure."""
    return f"not enough samples ({n_samples} of {'?' if min_samples is None else min_samples})"


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
            figure(lv.median_decode_tok_s),
            figure(lv.min_decode_tok_s),
            figure(lv.median_ttft_s, 2),
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
    return figure(lv.ttft_quantile_s, 2) + over


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
