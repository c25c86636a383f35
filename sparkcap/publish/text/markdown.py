"""The Prefect artifacts: the capacity table and the change list as Markdown, every recorded
text in them escaped to the characters it is."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sparkcap.publish.text.capacity import fleet_line
from sparkcap.publish.text.changes import change_subject_words
from sparkcap.publish.text.console import visible

if TYPE_CHECKING:
    from sparkcap.publish.marts import CapacityRow, ChangeRow, FleetRow


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
