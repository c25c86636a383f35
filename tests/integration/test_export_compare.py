"""Three nights staged and built with dbt, then ``sparkcap export --prometheus`` and ``sparkcap
compare --fail-on regression`` through the in-process CLI: the textfile parses back with
prometheus-client to the marts' capacities (the latest built run by default, ``--run`` another),
and the gate passes two equal nights and fails (exit 3) a slower night.

The nights are staged in model time (tests/change_nights.py): 2 streams 36 tok/s, 4 streams 23,
8 streams 13 (capacity 4 at the default 20 tok/s), and the slow night 35 % slower (2: 23.4,
4: 15.0, capacity 2). Three live sweeps of 24-token streams did this once, and one stall of a
starved test process in one wave could move a capacity: what these commands read is the marts.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkcap.transform.dbt_build import build
from tests.change_nights import History, Night, stage_history
from tests.support.cli import cli_in_process

pytestmark = pytest.mark.integration

# what export (publish/export.py: read_night) and compare (publish/compare.py, its gate
# included) read, with every model they are built from: not a whole build
READ = (
    "+fct_capacity +fct_fleet_capacity +fct_capacity_tiers +fct_changes +fct_energy_at_capacity "
    "+fct_levels +fct_prefill_interference +fct_link_health"
)


RATES_TOK_S = {2: 36.0, 4: 23.0, 8: 13.0}


def nights(db: Path) -> list[str]:
    """Three nights of one deployment, a day apart: two equal, then one 35 % slower."""
    history = History.exact("m", [Night(), Night(), Night(speed=0.65)], RATES_TOK_S)
    return stage_history(db, history, seed=35)


def exported(path: Path) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    return {
        f.name: {tuple(sorted(s.labels.items())): s.value for s in f.samples}
        for f in text_string_to_metric_families(path.read_text(encoding="utf-8"))
    }


@pytest.mark.reliability
def test_export_parses_back_and_compare_gates_a_slower_night(db_path: Path, tmp_path: Path) -> None:
    first, equal, slower = nights(db_path)
    build(db_path, select=READ)
    with duckdb.connect(str(db_path), read_only=True) as con:
        caps = dict(
            con.execute(
                "select run_id, capacity_streams from marts.fct_capacity where is_measured"
            ).fetchall()
        )
    assert caps == {first: 4, equal: 4, slower: 2}, caps  # else the gate below proves nothing
    db = ["--db", str(db_path)]

    prom = tmp_path / "textfile" / "sparkcap.prom"
    prom.parent.mkdir()
    p = cli_in_process("export", "--prometheus", str(prom), *db)
    assert p.returncode == 0
    assert f"wrote {prom}: run {slower}" in p.stdout
    got = exported(prom)
    pair = (("deployment", "m"), ("workload", "code"))
    at_20 = tuple(sorted((*pair, ("threshold_tok_s", "20"))))
    assert got["sparkcap_run_info"] == {(("run_id", slower),): 1.0}
    assert got["sparkcap_capacity_streams"] == {at_20: 2.0}
    assert got["sparkcap_capacity_measured"] == {pair: 1.0}
    assert list(prom.parent.iterdir()) == [prom]  # no temporary file left for the collector

    assert cli_in_process("export", "--prometheus", str(prom), "--run", first, *db).returncode == 0
    assert exported(prom)["sparkcap_capacity_streams"] == {at_20: 4.0}

    # a bad target: one error line, non-zero, the last good file kept
    p = cli_in_process("export", "--prometheus", str(prom.parent), *db)
    assert p.returncode == 1
    err = p.stderr.strip().splitlines()
    assert err == [f"error: cannot write {prom.parent}: it is a directory"]
    assert exported(prom)["sparkcap_capacity_streams"] == {at_20: 4.0}

    # the gate: equal nights pass, the slower one fails with exit 3 and says why
    p = cli_in_process("compare", first, equal, "--fail-on", "regression", *db)
    assert p.returncode == 0
    assert "regression" not in p.stderr
    p = cli_in_process("compare", equal, slower, "--fail-on", "regression", *db)
    assert p.returncode == 3
    assert "capacity" in p.stdout  # the comparison itself is printed as before
    lines = p.stderr.strip().splitlines()
    assert "regression: m/code capacity 2 streams, below 4 in " + equal in lines[0], lines
    assert lines[-1].startswith(f"error: run {slower} regressed against {equal}: ")
    # without --fail-on the comparison's exit status is unchanged
    assert cli_in_process("compare", equal, slower, *db).returncode == 0

    # a later night without the pair the earlier one measured (its deployment down, or a night
    # of another fleet) regressed: never measured, so never shown to hold; the words name the
    # two fleets when they differ
    other_history = History.exact("other", [Night()], RATES_TOK_S, fleet="lab")
    (other,) = stage_history(db_path, other_history, seed=36)
    build(db_path, select=READ + " +fct_capacity_regressions")
    p = cli_in_process("compare", equal, other, "--fail-on", "regression", *db)
    assert p.returncode == 3
    lines = p.stderr.strip().splitlines()
    assert (
        f"regression: m/code not in {other}'s night (4 streams in {equal}): never measured, so "
        f"never shown to hold ({equal} measured no fleet (an ad-hoc sweep), {other} fleet 'lab')"
    ) in lines[0], lines
    assert lines[-1].startswith(f"error: run {other} regressed against {equal}: "), lines
    # each night's own chain is its fleet's: the lab's first night is judged against nothing,
    # and the ad-hoc sweeps' slower night against the equal one before it
    with duckdb.connect(str(db_path), read_only=True) as con:
        chain = con.execute(
            "select fleet_name, earlier_run_id, later_run_id, bool_or(is_regression) "
            "from marts.fct_capacity_regressions group by all order by later_run_id"
        ).fetchall()
    assert chain == [(None, first, equal, False), (None, equal, slower, True)], chain
    # a later night never built (staged after the last build, or its build stopped): one line,
    # non-zero, and no table of dashes before it
    (unbuilt,) = stage_history(db_path, History.exact("late", [Night()], RATES_TOK_S), seed=37)
    p = cli_in_process("compare", equal, unbuilt, "--fail-on", "regression", *db)
    assert p.returncode == 1
    assert p.stdout == "", p.stdout
    assert p.stderr.strip().splitlines() == [
        f"error: run {unbuilt} has no built capacity (never built, or its build stopped): run "
        f"`sparkcap build --db {db_path}`; the gate compares nothing until it is"
    ]
