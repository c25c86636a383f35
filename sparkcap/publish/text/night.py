"""What a night, a sweep or a validation ends on: the parts not measured, where the results
are, an interruption, the data quality's outcome."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparkcap.dq.validate import ValidationResult
    from sparkcap.publish.marts import FailedStep, RecordedRun


def step_gap_words(s: FailedStep) -> str:
    return f"{s.deployment or 'night'} {s.outcome}: {s.reason or 'no reason recorded'}"


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
