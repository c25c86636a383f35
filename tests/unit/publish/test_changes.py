"""The change marts as the CLI and the Prefect artifact read them: none from a warehouse built
before them (or part-way), typed rows once they are there, and the change list in words: one
line per flagged change with its size, p-value, baseline and what else changed, one line when
nothing changed, nothing without a baseline; a night prints them under its capacities."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from sparkcap import cli
from sparkcap.publish import marts, terminal
from sparkcap.publish.marts import ChangeRow
from sparkcap.publish.night import read_night
from sparkcap.publish.text.changes import change_lines
from sparkcap.publish.text.markdown import changes_markdown
from tests.support.marts import LEVELS_AND_CAPACITY

OLD = """
create schema raw; create schema marts;
create table raw.runs (run_id varchar, started_at timestamptz, finished_at timestamptz,
    status varchar, status_reason varchar, sparkcap_version varchar);
insert into raw.runs values ('r1', '2026-12-01 01:00:00+00', null, 'complete', null, '0.7.0');
"""

NEW = """
create table marts.fct_changes (run_id varchar, deployment varchar, workload varchar,
    subject varchar, concurrency integer, baseline_value double, baseline_low double,
    baseline_high double, value double, change_pct double, p_value double, is_change boolean,
    direction varchar, n_baseline_runs bigint, what_else_changed varchar, verdict varchar,
    is_tested boolean);
insert into marts.fct_changes values
    ('r1', 'glm', 'code', 'level', 4, 50, 49, 51, 46, -8, 0.002, true, 'slower', 7,
     'engine 0.11.2 → 0.12.0', '8 % slower than the baseline', true),
    ('r1', 'glm', 'code', 'capacity', null, 6, 6, 6, 6, 0, null, false, null, 7, null,
     'as the baseline', true),
    ('r2', 'glm', 'code', 'drift', null, null, null, null, null, -3.5, 0.01, true, 'slower', 9,
     null, 'drifting down', true);
create table marts.fct_capacity_tiers (run_id varchar, deployment varchar, workload varchar,
    threshold_tok_s decimal(4, 1), ttft_p90_ceiling_s decimal(4, 1), capacity_streams integer,
    is_lower_bound boolean, is_measured boolean, is_threshold_of_record boolean);
insert into marts.fct_capacity_tiers values
    ('r1', 'glm', 'code', 20, null, 6, false, true, true),
    ('r1', 'glm', 'code', 10, 1, 9, false, true, false);
create table marts.fct_energy_at_capacity (run_id varchar, deployment varchar,
    workload varchar, capacity_streams integer, tokens_per_joule double, streams_per_kw double,
    status varchar, unavailable_reason varchar, streams_per_kw_low double,
    streams_per_kw_high double);
insert into marts.fct_energy_at_capacity values
    ('r1', 'glm', 'code', 6, 2.5, 30, 'measured', null, 28.5, 31.5),
    ('r1', 'spark', 'code', 4, null, null, 'unavailable', 'NVML: power N/A', null, null);
"""


@pytest.fixture
def old_db(hand_made_warehouse: Callable[[str, str], Path]) -> Path:
    return hand_made_warehouse("old.duckdb", OLD)


def test_a_warehouse_without_the_new_marts_reads_none(old_db: Path) -> None:
    assert marts.changes(old_db, "r1") == []
    assert marts.capacity_tiers(old_db, "r1") == []
    assert marts.energy_at_capacity(old_db, "r1") == []
    with pytest.raises(LookupError, match="no capacity results"):
        marts.latest_built_run(old_db)


def test_a_mart_built_by_an_older_sparkcap_is_one_line_with_the_command_that_rebuilds_it(
    old_db: Path,
) -> None:
    """fct_energy_at_capacity as a build before its timing range made it: the typed reader
    selects the range, and a person sees one line naming the file and the command, never
    DuckDB's binder traceback."""
    from sparkcap.errors import StaleWarehouse

    with duckdb.connect(str(old_db)) as con:
        con.execute(NEW)
        con.execute(
            "create or replace table marts.fct_energy_at_capacity as select * exclude "
            "(streams_per_kw_low, streams_per_kw_high) from marts.fct_energy_at_capacity"
        )
    with pytest.raises(StaleWarehouse) as caught:
        marts.energy_at_capacity(old_db, "r1")
    line = str(caught.value)
    assert "\n" not in line and line.startswith(f"{old_db}: built by another sparkcap (")
    assert "streams_per_kw_low" in line and f"`sparkcap build --db {old_db}`" in line


def test_the_new_marts_read_back_typed(old_db: Path) -> None:
    with duckdb.connect(str(old_db)) as con:
        con.execute(NEW)
    cap, level = marts.changes(old_db, "r1")  # capacity, drift, then each level
    assert (level.subject, level.concurrency, level.is_change, level.direction) == (
        "level",
        4,
        True,
        "slower",
    )
    assert cap.concurrency is None and not cap.is_change
    assert [c.subject for c in marts.changes(old_db, "r1", flagged_only=True)] == ["level"]
    tiers = marts.capacity_tiers(old_db, "r1")
    assert [(t.threshold_tok_s, t.ttft_p90_ceiling_s) for t in tiers] == [(10.0, 1.0), (20.0, None)]
    assert all(type(t.threshold_tok_s) is float for t in tiers)
    glm, spark = marts.energy_at_capacity(old_db, "r1")
    assert glm.tokens_per_joule == 2.5 and spark.tokens_per_joule is None
    assert (glm.streams_per_kw_low, glm.streams_per_kw_high) == (28.5, 31.5)
    assert spark.unavailable_reason == "NVML: power N/A"


def change(**kw: object) -> ChangeRow:
    row: dict[str, object] = dict(
        deployment="glm",
        workload="code",
        subject="level",
        concurrency=4,
        baseline_value=50.0,
        baseline_low=49.0,
        baseline_high=51.0,
        value=46.0,
        change_pct=-8.04,
        p_value=0.0021,
        is_change=True,
        direction="slower",
        n_baseline_runs=7,
        what_else_changed="engine 0.11.2 → 0.12.0",
        verdict="8 % slower than the baseline",
    )
    row.update(kw)
    return ChangeRow(**row)  # type: ignore[arg-type]


def test_a_flagged_change_is_one_line_with_its_size_p_baseline_and_cause() -> None:
    quiet = change(subject="capacity", concurrency=None, is_change=False, direction=None)
    assert change_lines([change(), quiet]) == [
        "change vs baseline — glm/code rate at 4 streams: -8.0 % (p 0.0021; baseline 50 "
        "[49, 51] of 7 runs) — 8 % slower than the baseline; also changed: engine 0.11.2 → 0.12.0"
    ]


def test_nothing_flagged_is_one_line_and_no_baseline_is_none() -> None:
    quiet = change(is_change=False, direction=None, what_else_changed=None)
    assert change_lines([quiet, quiet]) == ["no change vs baseline (2 comparison(s))"]
    assert change_lines([]) == []
    # a first night has rows, but none was compared: it says nothing, never "no change"
    untested = change(is_change=False, direction=None, n_baseline_runs=0, is_tested=False)
    assert change_lines([untested, untested]) == []
    assert "No baseline" in changes_markdown("r1", [untested])


def test_a_drift_without_a_baseline_band_still_reads_as_one_line() -> None:
    drift = change(
        subject="drift",
        concurrency=None,
        baseline_value=None,
        p_value=None,
        what_else_changed="server restarted\x1b[2J",
    )
    (line,) = change_lines([drift])
    assert line == (
        "change vs baseline — glm/code drift: -8.0 % — 8 % slower than the baseline; "
        "also changed: server restarted\\x1b[2J"
    )


def test_the_change_artifact_lists_flagged_changes_each_in_its_cells() -> None:
    md = changes_markdown("r1", [change(verdict="slower | by 8 %"), change(is_change=False)])
    rows = [x for x in md.splitlines() if x.startswith("| glm")]
    assert rows == [
        "| glm | code | rate at 4 streams | -8.0 % | 0.0021 | 50 | engine 0.11.2 → 0.12.0 | "
        "slower \\| by 8 % |"
    ]
    assert "No change vs baseline (1 comparison(s))." in changes_markdown(
        "r1", [change(is_change=False)]
    )
    assert "No baseline" in changes_markdown("r1", [])


@pytest.mark.reliability
def test_a_servers_text_in_the_change_artifact_renders_as_text() -> None:
    """A model's `root` reaches "what else changed", and the artifact is Markdown, where an
    HTML comment would hide the rest of it and a <script> or an image beacon would pass: every
    cell is escaped so it renders as the characters the server sent."""
    root = (
        "<!-- x --> <script>alert(1)</script> ![b](http://198.51.100.7/p.png) "
        "[link](http://x) `code` a & b"
    )
    md = changes_markdown("r1", [change(what_else_changed=f"root /m → {root}")])
    (row,) = [x for x in md.splitlines() if x.startswith("| glm")]
    for raw in ("<!--", "<script", "![b](", "[link](", "`code`", " & "):
        assert raw not in row, (raw, row)
    assert (
        "&lt;!-- x --&gt; &lt;script&gt;alert(1)&lt;/script&gt; "
        "!\\[b\\](http://198.51.100.7/p.png) \\[link\\](http://x) \\`code\\` a &amp; b" in row
    ), row


PRINTED = (
    LEVELS_AND_CAPACITY
    + """
create table marts.fct_bottlenecks (run_id varchar, deployment varchar, workload varchar,
    capacity_streams integer, limit_level integer, bottleneck varchar, confidence varchar,
    evidence varchar, advice varchar, limit_level_tok_s double, limit_level_bound_tok_s double,
    limit_level_share_of_bound double, bound_capacity_streams integer, bound_flags varchar,
    unavailable_evidence varchar, is_confirmed boolean, overruled_evidence varchar);
insert into marts.fct_levels values
    ('r1', 'glm', 'code', 4, 1, 1, 0, 46, 45, 0.1, null, null, null, null, null, null, null,
     false);
insert into marts.fct_capacity values
    ('r1', 'glm', 'code', 'grid', 20.0, 4, 4, 8, 4, false, false, true, null, null, 0,
     'not run (grid)', 1, '4 streams (fails at 8)');
"""
)


def test_a_night_prints_its_flagged_changes_after_its_capacities(
    old_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with duckdb.connect(str(old_db)) as con:
        con.execute(PRINTED)
    terminal.print_levels(cli.out, sys.stdout, read_night(old_db, "r1"))
    before = capsys.readouterr().out.splitlines()
    assert before[-1] == "capacity at 20 tok/s — glm/code: 4 streams (fails at 8)"  # no mart
    with duckdb.connect(str(old_db)) as con:
        con.execute(NEW)
    terminal.print_levels(cli.out, sys.stdout, read_night(old_db, "r1"))
    after = capsys.readouterr().out.splitlines()
    assert after[-2] == before[-1]
    assert after[-1].startswith("change vs baseline — glm/code rate at 4 streams: -8.0 % (p 0.002")
    terminal.print_levels(
        cli.out, sys.stdout, read_night(old_db, "r1"), "json"
    )  # the documented JSON stays one document
    assert json.loads(capsys.readouterr().out)["run_id"] == "r1"
