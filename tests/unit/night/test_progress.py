"""What a night shows while it runs: every step's start and end with its time, and a live line
that fits an 80-column terminal."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from sparkcap.loadgen.records import RequestRecord, SearchDecision, Status, WaveRecord
from sparkcap.night import progress
from sparkcap.night import steps as pipeline
from sparkcap.night.progress import NightProgress
from tests.support.waves import add_ok_stream, wave_record


def _ok_wave(deployment: str, streams: int, trial: int) -> WaveRecord:
    """A prose wave of ``streams`` ok streams of 100 tokens, each 0.1 s to its first token and
    5 s to its last: 20.2 tok/s apiece."""
    w = wave_record(streams, trial, deployment=deployment, workload="prose", wave_id="w")
    for _ in range(streams):
        add_ok_stream(w, 100, 10**8, 5 * 10**9)
    return w


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, *args: object) -> None:  # waves are not this test's business
        pass

    def line(self, text: str) -> None:
        self.lines.append(text)


def test_every_step_says_when_it_starts_and_ends_with_its_time() -> None:
    sink = Lines()
    progress.add_sink(sink)
    try:
        ok = pipeline.Step("stage", lambda night: pipeline.StepResult("stage", "3 waves"))
        pipeline.run_step(ok, None)  # type: ignore[arg-type]

        def broken(night: object) -> pipeline.StepResult:
            raise RuntimeError("dbt build failed: fct_capacity: boom\nsecond line")

        with pytest.raises(RuntimeError):
            pipeline.run_step(pipeline.Step("dbt-build", broken), None)  # type: ignore[arg-type]
    finally:
        progress.remove_sink(sink)
    assert sink.lines[0] == "step stage …"
    assert sink.lines[1].startswith("step stage done in ") and sink.lines[1].endswith(" s: 3 waves")
    assert sink.lines[2] == "step dbt-build …"
    assert sink.lines[3].startswith("step dbt-build failed after ")
    assert sink.lines[3].endswith(" s: dbt build failed: fct_capacity: boom")  # one line


@pytest.mark.parametrize(
    ("name", "streams", "shown"),
    [
        ("m", 4, "m/prose c=4 trial 1: 4/4 ok, wave median 20.2 tok/s"),  # the whole text fits
        ("deepseek", 16, "deepseek/prose c=16 t1 16/16 ok 20.2 tok/s"),  # the short wording
        (
            "a-deployment-with-a-very-long-name",
            16,
            "a-deployment-with-a-very-long-name/prose c=16 t1 16…",
        ),
    ],
)
def test_the_live_line_fits_80_columns_and_keeps_its_times(
    name: str, streams: int, shown: str
) -> None:
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=True, color_system=None)
    board = NightProgress({(name, "prose"): 20}, console=console, live=True)
    w = _ok_wave(name, streams, trial=1)  # the line shows the wave's median as the client read it
    with board:
        board(w, 1, 20)
        assert board.progress is not None
        board.progress.refresh()
    rows = [
        re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", r)
        for r in out.getvalue().replace("\r", "\n").split("\n")
    ]
    shown_rows = [r for r in rows if shown in r]  # the wave's median is on the line ...
    assert shown_rows, rows
    for row in shown_rows:  # ... and so is the time left, within 80 columns
        assert len(row) <= 80 and row.rstrip().endswith("left"), row


def test_a_decided_search_level_shows_the_judges_median_by_its_stored_name() -> None:
    """The client's own median and the live judge's level median are two numbers: each has its
    name ("live median" is the judge's, stored as live_median_tok_s)."""
    w = _ok_wave("m", 2, trial=2)
    w.search_decision = SearchDecision(
        kind="level",
        search_step=1,
        concurrency=2,
        n_trials=2,
        n_valid_trials=2,
        confidence=0.9,
        trials_max=3,
        median_tok_s=21.04,
        ci_low_tok_s=20.5,
        ci_high_tok_s=21.5,
        verdict="pass",
        stop_reason="interval cleared the threshold at 90%",
        next_action="go up",
    )
    assert progress.wave_summary(w) == (
        "c=2 trial 2: 2/2 ok, wave median 20.2 tok/s, live median 21.0 tok/s (pass)"
    )
    assert progress.wave_summary(w, short=True) == "c=2 t2 2/2 ok live 21.0 tok/s"


def test_a_probes_lines_show_its_own_requests_with_their_live_ttft() -> None:
    """The background streams a probe holds are not its answer; a request without a first
    token has no TTFT to show (a dash, never 0)."""
    w = WaveRecord("w", "r", "m", "m", "http://x/v1", "prose", 3, 1, 0, 0)
    roles = [("background", 0, 10**8), ("long", 2 * 10**9, 5 * 10**9), ("probe", 10**9, None)]
    for i, (role, sent_ns, first_ns) in enumerate(roles):
        r = RequestRecord(f"w/s{i}", i, "p", 4, 4, 0.0, sent_ns=sent_ns, first_token_ns=first_ns)
        r.role, r.prompt_tokens, r.cached_prompt_tokens = role, 4000, 0
        r.status = Status.OK if first_ns else Status.TRUNCATED
        w.requests.append(r)
    assert progress.probe_lines([w]) == [
        "long     sent   2.00 s  live TTFT    3.00 s  prompt 4000 tok, cached 0  ok",
        "probe    sent   1.00 s  live TTFT         —  prompt 4000 tok, cached 0  truncated",
    ]
    assert progress.probe_lines([]) == []
