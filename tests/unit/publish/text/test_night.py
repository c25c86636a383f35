"""What a night prints at its end: each gap named, a Ctrl-C saying only what is certain, one
error line after what it missed, and the data docs named only when they were written."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkcap.publish.marts import FailedStep, RecordedRun
from sparkcap.publish.text.night import (
    interrupted_line,
    night_failures,
    night_lines,
    step_gap_words,
)


def test_a_night_gap_names_the_step_or_the_night() -> None:
    assert step_gap_words(FailedStep("dead", "sweep failed", "endpoint unreachable")) == (
        "dead sweep failed: endpoint unreachable"
    )
    assert step_gap_words(FailedStep(None, "link-check failed", None)) == (
        "night link-check failed: no reason recorded"
    )


@pytest.mark.parametrize(
    ("recorded", "line"),
    [
        (None, "interrupted (Ctrl-C): run r1 stopped; the waves it staged are kept"),
        (
            RecordedRun("r1", None, 0),
            "interrupted (Ctrl-C) before the run started; nothing was recorded",
        ),
        (
            RecordedRun("r1", "complete", 8),
            "interrupted (Ctrl-C) after the sweep: run r1 and its 8 wave(s) are recorded "
            "(`sparkcap build`, then `sparkcap report`, finish it)",
        ),
        (
            RecordedRun("r1", "incomplete", 3),
            "interrupted (Ctrl-C): run r1 is marked incomplete; its 3 staged wave(s) are kept "
            "(`sparkcap build` builds them)",
        ),
    ],
)
def test_a_ctrl_c_says_only_what_is_certain(recorded: RecordedRun | None, line: str) -> None:
    assert interrupted_line("r1", recorded) == line


@pytest.mark.parametrize(
    ("result", "lines"),
    [
        ({"run_id": "r1", "gaps": [], "run_status": "complete", "dq_success": True}, []),
        (
            {"run_id": "r1", "gaps": ["a/code: x", "b probes failed: y"], "dq_success": False},
            [
                "not measured — a/code: x",
                "not measured — b probes failed: y",
                "error: run r1 is incomplete: 2 part(s) of the night missing (listed above and "
                "in the report)",
            ],
        ),
        (
            {"run_id": "r1", "gaps": [], "run_status": "incomplete", "run_reason": "Ctrl-C"},
            ["error: run r1 is incomplete: Ctrl-C"],
        ),
        (
            {"run_id": "r1", "gaps": [], "dq_success": False, "dq_failed": ["a", "b"]},
            ["error: data-quality failed: a, b"],
        ),
    ],
)
def test_a_night_ends_on_one_error_line_after_what_it_missed(
    result: dict[str, object], lines: list[str]
) -> None:
    assert night_failures(result) == lines


def test_night_lines_name_the_data_docs_only_when_they_were_written(tmp_path: Path) -> None:
    report = tmp_path / "r1" / "index.html"
    result = {"report": str(report)}
    assert [x.split(":")[0] for x in night_lines(result, Path("w.duckdb"))] == [
        "database",
        "report",
        "open it",
    ]
    docs = tmp_path / "r1" / "dq" / "data_docs" / "index.html"
    docs.parent.mkdir(parents=True)
    docs.write_text("")
    assert f"data docs: {docs}" in night_lines(result, Path("w.duckdb"))
