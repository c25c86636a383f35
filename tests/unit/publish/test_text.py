"""The words and forms sparkcap prints: a capacity worded once from the mart's verdict, the
fleet's line, the Prefect artifact's table, and CSV and JSON that survive any text a server or
a user put in a name or a reason."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from sparkcap.publish.marts import (
    BottleneckRow,
    CapacityRow,
    ContextLadderRow,
    FailedStep,
    FleetRow,
    LevelRow,
    LinkRow,
    QueryResult,
    RecordedRun,
)
from sparkcap.publish.text.capacity import (
    bottleneck_line,
    capacity_line,
    capacity_words,
    fleet_line,
)
from sparkcap.publish.text.console import text_console
from sparkcap.publish.text.context_ladder import context_ladder_line
from sparkcap.publish.text.links import link_line
from sparkcap.publish.text.markdown import capacity_markdown
from sparkcap.publish.text.night import (
    interrupted_line,
    night_failures,
    night_lines,
    step_gap_words,
)
from sparkcap.publish.text.replay import replay_lines, replay_table
from sparkcap.publish.text.tables import CAPACITY_COLUMNS, LEVEL_COLUMNS, print_levels, print_rows


def capacity(verdict: str, *, measured: bool = True, **kw: object) -> CapacityRow:
    row = {
        "deployment": "glm",
        "workload": "code",
        "threshold_tok_s": 20.0,
        "capacity_streams": 4,
        "is_lower_bound": False,
        "is_below_lowest_level": False,
        "first_failing_level": 8,
        "method": "grid",
        "level_capacity_streams": 4,
        "search_low_streams": None,
        "search_high_streams": None,
        "n_straddling_levels": 0,
        "sustain_result": "not run (grid)",
        "is_measured": measured,
        "capacity_verdict": verdict,
        "capacity_interpolated_streams": 4,
        "n_valid_trials": 6,
    }
    row.update(kw)
    return CapacityRow(**row)  # type: ignore[arg-type]


# one row per way fct_capacity words a capacity (capacity_verdict's cases, as dbt writes them)
VERDICTS = [
    ("4 streams (fails at 8)", True),
    ("1 stream (fails at 2)", True),
    ("≥ 16 streams (all tested levels pass)", True),
    ("below 20 tok/s even at the lowest level", True),
    ("3 streams (no valid measurement at level 4: 2 of 2 truncated)", True),
    ("3 streams (fails at 4) · search; sustain wave: held at 3 streams", True),
    ("2 streams · search; sustain wave: fell at 3, held at 2 streams: capacity moved down", True),
    (
        "3 streams (fails at 4) · search; sustain wave: held at 3 streams"
        " · undecided between 3 and 5",
        True,
    ),
    ("no valid measurement at level 1: 2 of 2 rejected (429)", False),
    (
        "no valid measurement at level 1: 1 of 1 trial invalid: client timing"
        " (nor at any other level)",
        False,
    ),
]


@pytest.mark.parametrize(("verdict", "measured"), VERDICTS)
def test_each_verdict_is_printed_as_the_mart_words_it(verdict: str, measured: bool) -> None:
    row = capacity(verdict, measured=measured)
    assert capacity_words(row) == f"glm/code: {verdict}"
    assert capacity_line(row) == f"capacity at 20 tok/s — glm/code: {verdict}"
    # only a pair that measured nothing is the reason a sweep fails, and says so first
    failing = capacity_words(row, failing=True)
    assert failing == (
        f"glm/code: {verdict}" if measured else f"glm/code measured nothing: {verdict}"
    )


@pytest.mark.parametrize(("threshold", "shown"), [(20.0, "20"), (12.5, "12.5"), (0.25, "0.25")])
def test_a_threshold_prints_as_its_number(threshold: float, shown: str) -> None:
    row = capacity("4 streams (fails at 8)", threshold_tok_s=threshold)
    assert capacity_line(row).startswith(f"capacity at {shown} tok/s — ")


@pytest.mark.parametrize(
    ("extrapolated", "missing", "note"),
    [
        (None, None, ""),
        ("qwen", None, " (replicas extrapolated: qwen)"),
        (None, "dead", " (partial: dead not measured)"),
        ("qwen", "dead, r429", " (replicas extrapolated: qwen) (partial: dead, r429 not measured)"),
    ],
)
def test_the_fleet_line_says_what_the_sum_rests_on(
    extrapolated: str | None, missing: str | None, note: str
) -> None:
    line = fleet_line(FleetRow("code", 28, 20.0, extrapolated, missing, 3))
    assert line == f"fleet capacity at 20 tok/s — code: 28 streams{note}"


def test_a_fleet_figure_nothing_measured_is_said_so_and_sessions_are_counted_as_sessions() -> None:
    assert fleet_line(FleetRow("agent", 0, 20.0, None, "gemma", 0)) == (
        "fleet capacity at 20 tok/s — agent: not measured (gemma)"
    )
    assert fleet_line(FleetRow("agent", 3, 20.0, None, "dead", 1)) == (
        "fleet capacity at 20 tok/s — agent: 3 sessions (partial: dead not measured)"
    )
    assert fleet_line(FleetRow("agent", 1, 20.0, None, None, 1)) == (
        "fleet capacity at 20 tok/s — agent: 1 session"
    )


def test_the_artifact_uses_the_fleet_line_and_keeps_each_verdict_in_its_cell() -> None:
    hostile = "no valid measurement at level 1: a | b\nc \\ d"
    markdown = capacity_markdown(
        "r1",
        [FleetRow("code", 4, 20.0, "m", None, 1)],
        [
            capacity("≥ 2 streams (all tested levels pass)", first_failing_level=None),
            capacity(hostile, measured=False, deployment="r429", capacity_streams=0),
        ],
    )
    lines = markdown.splitlines()
    assert lines[:3] == [
        "# sparkcap run r1",
        "",
        "- fleet capacity at 20 tok/s — code: 4 streams (replicas extrapolated: m)",
    ]
    rows = [line for line in lines if line.startswith("| glm") or line.startswith("| r429")]
    assert rows[0] == "| glm | code | 4 | 4 | — | no | 6 | ≥ 2 streams (all tested levels pass) |"
    # one row, the same number of cells as the header: the reason's | and line break are text
    assert len(rows) == 2 and rows[1].endswith(
        "| no valid measurement at level 1: a \\| b c \\\\ d |"
    )
    assert rows[1].replace("\\|", "").count("|") == lines[4].count("|")


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


def test_the_levels_output_columns_are_the_readers_fields() -> None:
    assert LevelRow._fields == LEVEL_COLUMNS
    assert set(CAPACITY_COLUMNS) <= set(CapacityRow._fields)


HOSTILE = 'dep,"quoted"\nline'


def _levels() -> tuple[list[LevelRow], list[CapacityRow]]:
    levels = [
        LevelRow(HOSTILE, "code", 1, 1, 1, 120.5, 110.25, 0.01, *[None] * 7, 0, False),
        LevelRow(HOSTILE, "code", 2, 0, 1, None, None, None, *[None] * 7, 2, None),
    ]
    caps = [capacity('≥ 1 stream, "odd"\nreason', deployment=HOSTILE, is_lower_bound=True)]
    return levels, caps


def test_levels_as_csv_read_back_to_the_same_values() -> None:
    levels, caps = _levels()
    stream = io.StringIO()
    print_levels(Console(file=io.StringIO()), stream, "r1", levels, caps, "csv")
    rows = list(csv.DictReader(io.StringIO(stream.getvalue(), newline="")))
    assert len(rows) == 2
    assert {r["deployment"] for r in rows} == {HOSTILE}
    assert rows[0]["capacity_verdict"] == '≥ 1 stream, "odd"\nreason'
    assert (rows[0]["median_decode_tok_s"], rows[1]["median_decode_tok_s"]) == ("120.5", "")
    assert (rows[0]["threshold_tok_s"], rows[0]["is_lower_bound"]) == ("20.0", "True")
    assert list(rows[0])[:2] == ["run_id", "deployment"]


def test_levels_as_json_are_one_ascii_document_with_every_value() -> None:
    levels, caps = _levels()
    stream = io.StringIO()
    print_levels(Console(file=io.StringIO()), stream, "r1", levels, caps, "json")
    out = stream.getvalue()
    assert out.endswith("\n") and out.count("\n") == 1 and out.isascii()
    doc = json.loads(out)
    assert doc["run_id"] == "r1"
    assert doc["levels"][1] == dict(zip(LEVEL_COLUMNS, levels[1], strict=True))
    assert doc["capacity"][0]["capacity_verdict"] == '≥ 1 stream, "odd"\nreason'
    assert doc["capacity"][0]["threshold_tok_s"] == 20.0


def test_levels_as_a_table_show_missing_figures_as_dashes() -> None:
    levels, caps = _levels()
    buf = io.StringIO()
    print_levels(Console(file=buf, width=200), io.StringIO(), "r1", levels, caps)
    printed = buf.getvalue()
    assert "120.5" in printed and "0/1" in printed and "—" in printed
    assert printed.rstrip().endswith('≥ 1 stream, "odd"\nreason')


def test_agent_levels_show_the_turn_ttft_their_rule_reads_and_streams_leave_it_blank() -> None:
    levels = [
        LevelRow(
            "d", "agent", 1, 1, 1, 30.0, 28.0, 1.2, 0.9, 3.97, 5.0, True, 64, 64, True, 0, False
        ),
        LevelRow(
            "d", "agent", 2, 1, 1, 25.0, 22.0, 4.1, 0.9, 13.05, 5.0, False, 90, 64, True, 0, False
        ),
        LevelRow("d", "code", 4, 1, 1, 40.0, 38.0, 0.2, *[None] * 7, 0, False),
        # 63 turns: one short of what supports a p90 at 0.99, so no figure
        LevelRow(
            "d", "agent", 8, 1, 1, 15.0, 12.0, 9.1, 0.9, 17.5, 5.0, False, 63, 64, False, 0, False
        ),
    ]
    buf = io.StringIO()
    print_levels(Console(file=buf, width=200), io.StringIO(), "r1", levels, [])
    lines = buf.getvalue().splitlines()
    (header,) = [line for line in lines if "TTFT p90 s" in line]
    agent_1, agent_2, code = (
        next(x for x in lines if x.split()[1:3] == w)
        for w in (["agent", "1"], ["agent", "2"], ["code", "4"])
    )
    assert "3.97" in agent_1 and ">" not in agent_1
    assert "13.05 > 5" in agent_2  # the rule's figure, over its ceiling: the level fails on it
    assert len(code.split()) == len(agent_1.split()) - 1  # no TTFT rule, no figure
    (agent_8,) = [x for x in lines if x.split()[1:3] == ["agent", "8"]]
    assert "not enough samples (63 of 64) > 5" in agent_8 and "17.5" not in agent_8
    # a run without agent levels keeps its columns
    buf = io.StringIO()
    print_levels(Console(file=buf, width=200), io.StringIO(), "r1", levels[2:3], [])
    assert "p90" not in buf.getvalue() and header


def test_sql_rows_as_csv_and_json_escape_their_cells() -> None:
    from datetime import date
    from decimal import Decimal

    rows = QueryResult(
        ["a", "b", "c"], [(HOSTILE, None, Decimal("1.50")), (1, date(2020, 1, 2), 2.5)]
    )
    csv_out, json_out = io.StringIO(), io.StringIO()
    print_rows(Console(file=io.StringIO()), csv_out, rows, "csv")
    print_rows(Console(file=io.StringIO()), json_out, rows, "json")
    back = list(csv.reader(io.StringIO(csv_out.getvalue(), newline="")))
    assert back == [["a", "b", "c"], [HOSTILE, "", "1.50"], ["1", "2020-01-02", "2.5"]]
    assert json.loads(json_out.getvalue()) == [
        {"a": HOSTILE, "b": None, "c": "1.50"},  # what JSON has no type for, as its text
        {"a": 1, "b": "2020-01-02", "c": 2.5},
    ]


def test_sql_cells_print_as_text_never_as_markup_or_escape_sequences() -> None:
    buf = io.StringIO()
    console = text_console(file=buf, width=200)
    rows = QueryResult(["e", "f", "g"], [("\x1b]0;pwned\x07", "[bold]z[/]", None)])
    print_rows(console, io.StringIO(), rows, "table")
    printed = buf.getvalue()
    assert "\x1b" not in printed and "\\x1b]0;pwned\\x07" in printed
    assert "[bold]z[/]" in printed and "NULL" in printed


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


@pytest.mark.parametrize(
    ("link", "line"),
    [
        (LinkRow("ring", "lo", 12.5, 12.5, True, None), "ring/lo: 12.50 Gb/s of 12.5 nominal — ok"),
        (
            LinkRow("ring", "lo", 100.0, 40.0, False, None),
            "ring/lo: 40.00 Gb/s of 100 nominal — UNHEALTHY",
        ),
        (
            LinkRow("ring", "lo", 100.0, None, False, "timed out after 60 s"),
            "ring/lo: — of 100 nominal — FAILED (timed out after 60 s)",
        ),
    ],
)
def test_a_link_is_worded_from_dbts_verdict(link: LinkRow, line: str) -> None:
    assert link_line(link) == line


def test_a_search_step_decided_otherwise_live_is_named_with_the_records_reason() -> None:
    from sparkcap.publish.marts import SearchDisagreement
    from sparkcap.publish.text.capacity import search_disagreement_words

    d = SearchDisagreement(
        "glm", "code", "level", 12, "pass", "fail", "a counted trial queued streams", None
    )
    assert search_disagreement_words(d) == (
        "note: glm/code search level at 12 streams was decided live as pass; the record says "
        "fail (a counted trial queued streams)"
    )
    bare = d._replace(live_verdict=None, verdict_reason=None, invalid_reasons="dq: lengths")
    assert search_disagreement_words(bare).endswith("undecided; the record says fail (dq: lengths)")


def test_session_cache_lines_name_each_deployments_state_and_every_flagged_wave() -> None:
    from sparkcap.publish.marts import SessionCacheRow
    from sparkcap.publish.text.capacity import session_cache_lines

    rows = [
        SessionCacheRow("a", 1, 1, 1, "as planned", 0.95, "verified", False, None),
        SessionCacheRow("a", 2, 1, 1, "evicted", 0.3, "verified", True, "turns found 30%"),
        SessionCacheRow("b", 1, 1, 1, None, None, None, False, None),
    ]
    assert session_cache_lines(rows) == [
        "  sessions' cache a/agent: as planned, evicted over 2 wave(s); cache reset: verified",
        "  flagged a/agent 2 session(s) trial 1: turns found 30%",
        "  sessions' cache b/agent: nothing to judge over 1 wave(s)",
    ]


def _ladder(**kw: object) -> ContextLadderRow:
    base: dict[str, object] = dict(
        deployment="gemma",
        context_tokens=8192,
        context_source="llama-props",
        ttft_ceiling_s=5.0,
        n_rungs=4,
        n_measured_rungs=4,
        n_not_cold_rungs=0,
        largest_cold_prompt_tokens=2061,
        largest_warm_prompt_tokens=7982,
        first_failing_rung=4096,
        refused_rung_tokens=None,
        limited_by="ttft",
        status="measured",
        status_reason=None,
    )
    return ContextLadderRow(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("row", "line"),
    [
        (
            _ladder(),
            "gemma context ladder: largest prompt with TTFT ≤ 5 s: 2,061 tokens cold, 7,982 "
            "tokens warm; slower from the 4,096-token rung; context 8,192 (llama-props)",
        ),
        (
            _ladder(limited_by="context", first_failing_rung=8000, refused_rung_tokens=8000),
            "gemma context ladder: largest prompt with TTFT ≤ 5 s: 2,061 tokens cold, 7,982 "
            "tokens warm; refused from the 8,000-token rung (the context limit); context 8,192 "
            "(llama-props)",
        ),
        (
            _ladder(
                limited_by="ttft",
                first_failing_rung=1024,
                largest_cold_prompt_tokens=None,
                context_tokens=None,
                context_source="none",
            ),
            "gemma context ladder: largest prompt with TTFT ≤ 5 s: none cold, 7,982 tokens "
            "warm; slower from the 1,024-token rung; no context reported",
        ),
        (
            _ladder(limited_by="none", first_failing_rung=None, ttft_ceiling_s=0.5),
            "gemma context ladder: largest prompt with TTFT ≤ 0.5 s: 2,061 tokens cold, 7,982 "
            "tokens warm; every rung met it; context 8,192 (llama-props)",
        ),
        (
            _ladder(limited_by="none", first_failing_rung=None, n_not_cold_rungs=1),
            "gemma context ladder: largest prompt with TTFT ≤ 5 s: 2,061 tokens cold, 7,982 "
            "tokens warm; every rung met it; context 8,192 (llama-props); 1 rung(s) served "
            "from the cache, not counted as cold",
        ),
        (
            _ladder(
                status="unavailable",
                status_reason="the first rung (8192 tokens) was refused as too long",
            ),
            "gemma context ladder: unavailable (the first rung (8192 tokens) was refused as too "
            "long)",
        ),
    ],
)
def test_a_context_ladder_is_worded_from_its_summary(row: ContextLadderRow, line: str) -> None:
    assert context_ladder_line(row) == line


def _why(**kw: object) -> BottleneckRow:
    base: dict[str, object] = {
        "deployment": "qwen",
        "workload": "code",
        "capacity_streams": 8,
        "limit_level": 16,
        "bottleneck": "memory-bandwidth",
        "confidence": "medium",
        "evidence": "16.7 tok/s = 80 % of the 20.9 tok/s the memory allows at 16 streams",
        "advice": None,
        "limit_level_tok_s": 16.7,
        "limit_level_bound_tok_s": 20.9,
        "limit_level_share_of_bound": 0.8,
        "bound_capacity_streams": 12,
        "bound_flags": None,
        "unavailable_evidence": None,
        "is_confirmed": True,
        "overruled_evidence": None,
    }
    return BottleneckRow(**{**base, **kw})  # type: ignore[arg-type]


def test_the_why_line_says_what_the_measurements_overruled() -> None:
    line = bottleneck_line(
        _why(overruled_evidence="request-slots: 4 slot(s) for 16 streams, but up to 0 waiting")
    )
    assert line is not None
    assert line.startswith("  why qwen/code: memory bandwidth (medium) — 16.7 tok/s = 80 % of")
    assert line.endswith(
        "; overruled by the measurements: request-slots: 4 slot(s) for 16 streams, "
        "but up to 0 waiting"
    )


def test_a_verdict_only_configuration_supports_is_said_unconfirmed() -> None:
    line = bottleneck_line(
        _why(
            bottleneck="request-slots",
            confidence="low",
            is_confirmed=False,
            evidence="consistent with 2 slot(s) for 4 streams, unconfirmed: no server gauge",
        )
    )
    assert line == (
        "  why qwen/code: request slots (queueing), unconfirmed (low) — consistent with 2 "
        "slot(s) for 4 streams, unconfirmed: no server gauge"
    )


def test_a_replay_names_the_fleet_verdict_then_each_deployment_and_hides_thin_tails() -> None:
    from sparkcap.publish.marts import ReplayFleetRow, ReplayRow

    rows = [
        ReplayRow("a", 1.3, 3, 8.0, 300, 0, 14.1, 21, 17.2, 0.7, 0.1, 0.2, 0.19, 280, True,
                  0.41, 2, 4, 3, 0.125, "fails", "fails: code median 17.2 tok/s < 20",
                  17.2, None, 15.9, None, 12.5, "the model is off here: code median 8 %",
                  "rate"),
        ReplayRow("b", 1.3, 3, 16.0, 40, 0, 3.0, 5, 25.0, 0.0, 0.1, 0.9, 0.2, 40, False,
                  0.01, 0, 0, 0, 0.0, "holds",
                  "holds: 3.0 streams in flight on average at 25.0 tok/s"),
    ]  # fmt: skip
    fleet = ReplayFleetRow("0a1b2c3d", 1.3, 3, 2, 1, "a", "fails at a")
    lines = replay_lines("r1", fleet, rows, {"c": "ConnectError: refused"})
    assert lines[0] == (
        "open-loop replay of run r1 at 1.3× the rate plan's arrivals (seed 3): the plan fails"
        " at a (1 of 2 deployments hold)"
    )
    assert lines[0].startswith("open-loop replay of run r1 at 1.3× the rate plan's arrivals")
    assert lines[1:] == [
        "  a: fails: code median 17.2 tok/s < 20",
        "    the model is off here: code median 8 %",
        "  b: holds: 3.0 streams in flight on average at 25.0 tok/s",
        "  c: not replayed: ConnectError: refused",
    ]
    buf = io.StringIO()
    Console(file=buf, width=200).print(replay_table("r1", rows))
    b_line = next(x for x in buf.getvalue().splitlines() if x.split()[:1] == ["b"])
    assert "few (40)" in b_line and "0.90" not in b_line  # 40 TTFTs support no p90
    # measured beside the open-loop model's prediction: streams in flight and the code median
    assert "14.1/12.5" in buf.getvalue() and "17.2/15.9" in buf.getvalue()
    a_line = next(x for x in buf.getvalue().splitlines() if x.split()[:1] == ["a"])
    assert "2 · 0.41" in a_line  # two requests sent late, the worst 0.41 s behind
    # decode below the threshold beside 3 of a's 4 long prefills, 12.5 % of its time; b had none
    assert "12.5% (3/4)" in a_line and b_line.split()[-2:] == ["—", "holds"]
    # every header and cell whole at 80 columns (a cell wraps, never cut with an ellipsis)
    narrow = io.StringIO()
    Console(file=narrow, width=80).print(replay_table("r1", rows))
    assert "…" not in narrow.getvalue() and max(map(len, narrow.getvalue().splitlines())) <= 80
