"""The typed mart readers on a DuckDB file laid out as dbt builds it (only the columns read):
Python types out (a DECIMAL threshold is a float), the marts' order, and one clear error for
a run that is not there, SQL that fails or a warehouse that cannot be read."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest

from sparkcap.errors import NotFound, SparkcapError
from sparkcap.publish import marts
from sparkcap.publish.text.capacity import capacity_line, fleet_line
from tests.support.marts import LEVELS_AND_CAPACITY

SCHEMA = (
    """
create schema raw;
create schema marts;
create table raw.runs (run_id varchar, started_at timestamptz, finished_at timestamptz,
    status varchar, status_reason varchar, sparkcap_version varchar);
create table raw.waves (run_id varchar, wave_id varchar);
"""
    + LEVELS_AND_CAPACITY
    + """create table marts.fct_fleet_capacity (run_id varchar, workload varchar,
    threshold_tok_s decimal(3, 1), capacity_streams hugeint, extrapolated_deployments varchar,
    not_measured_deployments varchar, n_measured_deployments bigint);
create table marts.fct_step_outcomes (run_id varchar, deployment varchar, step varchar,
    outcome varchar, reason varchar, is_failed boolean);
insert into raw.runs values
    ('r2', '2026-12-02 01:00:00+00', null, 'incomplete', 'Ctrl-C', '0.6.0'),
    ('r1', '2026-12-01 01:00:00+00', '2026-12-01 02:00:00+00', 'complete', null, '0.6.0');
insert into raw.waves values ('r2', 'w1'), ('r2', 'w2'), ('r1', 'w3');
insert into marts.fct_levels values
    ('r1', 'm', 'code', 2, 1, 0, 2, null, null, null, null, null, null, null, null, null, null,
     null),
    ('r1', 'm', 'code', 1, 1, 1, 0, 120.5, 110.0, 0.01, null, null, null, null, null, null, null,
     false),
    ('r1', 'm', 'agent', 1, 1, 1, 0, 30.0, 28.0, 1.5, 0.9, 3.97, 5.0, true, 80, 64, true, false),
    ('r2', 'm', 'code', 1, 1, 1, 0, 99.0, 98.0, 0.02, null, null, null, null, null, null, null,
     false);
insert into marts.fct_capacity values
    ('r1', 'r429', 'code', 'grid', 15.0, 0, 0, 1, 0, false, false, false, null, null, 0,
     'not run (grid)', 0, 'no valid measurement at level 1: 2 of 2 rejected (429)'),
    ('r1', 'm', 'code', 'grid', 15.0, 1, 1, 2, 1, false, false, true, null, null, 0,
     'not run (grid)', 1, '1 stream (fails at 2)');
insert into marts.fct_fleet_capacity values ('r1', 'code', 15.0, 1, null, 'r429', 1);
insert into marts.fct_step_outcomes values
    ('r1', 'b', 'probe:mixed', 'probe failed', 'boom', true),
    ('r1', null, 'link-check', 'link-check failed', null, true),
    ('r1', 'a', 'sweep', 'ok', null, false);
"""
)


@pytest.fixture
def db(hand_made_warehouse: Callable[[str, str], Path]) -> Path:
    return hand_made_warehouse("w.duckdb", SCHEMA)


def test_levels_come_back_typed_in_the_marts_order(db: Path) -> None:
    assert marts.levels(db, "r1") == [
        marts.LevelRow(
            "m", "agent", 1, 1, 1, 30.0, 28.0, 1.5, 0.9, 3.97, 5.0, True, 80, 64, True, 0, False
        ),
        marts.LevelRow("m", "code", 1, 1, 1, 120.5, 110.0, 0.01, *[None] * 7, 0, False),
        marts.LevelRow("m", "code", 2, 0, 1, None, None, None, *[None] * 7, 2, None),
    ]
    assert marts.levels(db, "nope") == []


def test_a_decimal_threshold_is_read_as_a_float_and_prints_as_its_number(db: Path) -> None:
    caps = marts.capacities(db, "r1")
    assert [c.deployment for c in caps] == ["m", "r429"]
    assert all(type(c.threshold_tok_s) is float for c in caps)
    assert capacity_line(caps[0]) == "capacity at 15 tok/s — m/code: 1 stream (fails at 2)"
    (fleet,) = marts.fleet_capacities(db, "r1")
    assert type(fleet.threshold_tok_s) is float and type(fleet.capacity_streams) is int
    assert fleet_line(fleet) == (
        "fleet capacity at 15 tok/s — code: 1 streams (partial: r429 not measured)"
    )


def test_unmeasured_pairs_are_those_the_mart_says_measured_nothing(db: Path) -> None:
    (r429,) = marts.unmeasured_pairs(db, "r1")
    assert (r429.deployment, r429.capacity_streams, r429.is_measured) == ("r429", 0, False)
    assert r429.capacity_verdict == "no valid measurement at level 1: 2 of 2 rejected (429)"


def test_failed_steps_leave_out_what_succeeded(db: Path) -> None:
    assert marts.failed_steps(db, "r1") == [
        marts.FailedStep("b", "probe failed", "boom"),
        marts.FailedStep(None, "link-check failed", None),
    ]


def test_a_recorded_run_or_only_what_is_certain(db: Path, tmp_path: Path) -> None:
    assert marts.recorded_run(db, "r2") == marts.RecordedRun("r2", "incomplete", 2)
    assert marts.recorded_run(db, "r9") == marts.RecordedRun("r9", None, 0)
    assert marts.recorded_run(tmp_path / "none.duckdb", "r2") is None  # cannot be read


def test_runs_oldest_first_and_a_missing_one_named(db: Path) -> None:
    with duckdb.connect(str(db), read_only=True) as con:
        found = marts.runs(con, ["r2", "r1", "r9"])
        assert [r.run_id for r in found] == ["r1", "r2"]
        assert found[0].started_at == datetime(2026, 12, 1, 1, tzinfo=UTC)
        assert found[1].finished_at is None
        marts.require_runs(con, db, ["r1", "r2"])
        with pytest.raises(NotFound, match=r"no such run\(s\) in .*w.duckdb: r9, r8") as exc:
            marts.require_runs(con, db, ["r1", "r9", "r8"])
    assert isinstance(exc.value, LookupError)  # as callers that caught LookupError expect


def test_ad_hoc_sql_returns_its_rows_or_one_line_of_why_not(db: Path) -> None:
    result = marts.query(db, "select run_id, status from raw.runs order by run_id")
    assert result == marts.QueryResult(
        ["run_id", "status"], [("r1", "complete"), ("r2", "incomplete")]
    )
    with pytest.raises(marts.QueryFailed) as exc:
        marts.query(db, "select nosuch")
    assert isinstance(exc.value, SparkcapError)
    assert str(exc.value).startswith("SQL failed: Binder Error: ") and "\n" not in str(exc.value)
