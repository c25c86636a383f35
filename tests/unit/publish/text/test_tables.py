"""Levels and ad-hoc SQL rows as a table, CSV and JSON: missing figures as dashes, and cells
that survive any text a server or a user put in a name or a reason."""

from __future__ import annotations

import csv
import io
import json

from rich.console import Console

from sparkcap.publish.marts import CapacityRow, LevelRow, QueryResult
from sparkcap.publish.text.console import text_console
from sparkcap.publish.text.tables import CAPACITY_COLUMNS, LEVEL_COLUMNS, print_levels, print_rows
from tests.support.rows import capacity


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
