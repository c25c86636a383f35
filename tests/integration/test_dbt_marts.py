"""Sweep the simulator's twin of the study's fleet, build the marts, find the study's numbers."""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import duckdb
import pytest

from sparkcap.config.plan import SweepPlan, SweepRequest
from sparkcap.loadgen.records import SearchDecision, WaveRecord
from sparkcap.loadgen.search import level_key
from sparkcap.night.sweeps import run_sweeps
from sparkcap.servers.sim.fleet import TWIN, expected_fleet_capacity
from sparkcap.servers.sim.server import SimServer
from sparkcap.store.runs import run_end_to, run_start_to
from sparkcap.store.staging import stage_wave_to
from sparkcap.transform.dbt_build import build
from sparkcap.transform.live_judge import SearchJudge
from tests.support.cli import cli_in_process
from tests.support.queries import copy_of, q
from tests.support.sims import dep, fast_profile
from tests.support.timing import RELAXED_TIMING
from tests.support.waves import add_ok_stream, decode_ns, wave_record
from tests.twin import TWIN_TRIALS

pytestmark = [pytest.mark.integration, pytest.mark.slow]


# fct_capacity and every model it is built from (int_levels among them)
CAPACITY = "+fct_capacity"
# what `terminal.print_levels` reads (publish/marts: levels, capacities, bottlenecks,
# session_caches, changes, context_ladders), with every model they are built from
PRINTED = (
    "+fct_levels +fct_capacity +fct_bottlenecks +fct_session_cache +fct_changes "
    "+fct_context_ladder_summary"
)


@pytest.fixture(scope="module")
def night(twin_night: dict[str, object]) -> tuple[Path, str]:
    return Path(str(twin_night["db"])), str(twin_night["run_id"])


def test_twin_capacities_match_the_study(night: tuple[Path, str]) -> None:
    db, run_id = night
    rows = q(
        db,
        "select deployment, workload, capacity_streams, is_lower_bound, n_valid_trials "
        "from marts.fct_capacity where run_id = ?",
        [run_id],
    )
    got = {(d, w): c for d, w, c, _, _ in rows}
    for d in TWIN:
        assert got[(d.name, "code")] == d.expected_code_capacity, d.name
        assert got[(d.name, "prose")] == d.expected_prose_capacity, d.name
    assert all(not lb and n > 0 for *_, lb, n in rows)


def test_twin_fleet_sums(night: tuple[Path, str]) -> None:
    db, run_id = night
    rows = q(
        db,
        "select workload, capacity_streams, n_deployments, n_replicas, is_extrapolated, "
        "extrapolated_deployments, load_kind from marts.fct_fleet_capacity "
        "where run_id = ? order by workload",
        [run_id],
    )
    assert [(r[0], r[1]) for r in rows] == [
        ("code", expected_fleet_capacity("code")),
        ("prose", expected_fleet_capacity("prose")),
    ]
    assert expected_fleet_capacity("code") == 28 and expected_fleet_capacity("prose") == 11
    for _, _, n_dep, n_rep, extrapolated, which, kind in rows:
        assert (n_dep, n_rep, extrapolated, which) == (3, 4, True, "qwen")
        assert "not a mixed load" in kind


def test_glm_code_at_four_streams(night: tuple[Path, str]) -> None:
    db, run_id = night
    (median, ci_low, ci_high, passes) = q(
        db,
        "select median_decode_tok_s, ci_low_tok_s, ci_high_tok_s, passes_threshold "
        "from marts.fct_levels where run_id = ? and deployment = 'glm' and workload = 'code' "
        "and concurrency = 4",
        [run_id],
    )[0]
    assert 20.0 <= median <= 23.5 and passes
    assert ci_low <= median <= ci_high


def test_trials_and_aggregate_throughput(night: tuple[Path, str]) -> None:
    db, run_id = night
    warm = q(
        db,
        "select count(*), bool_or(is_valid) from marts.fct_trials where run_id = ? and trial = 0",
        [run_id],
    )[0]
    assert warm[0] == 3 * 2 * 5 and warm[1] is False
    bad = q(
        db,
        "select count(*) from marts.fct_trials where run_id = ? and trial > 0 and not is_valid "
        "and not is_superseded",
        [run_id],
    )[0][0]
    assert bad == 0
    # a wave the client spoiled (a loaded machine) was measured again: every counted trial
    # ends in exactly one valid attempt, whatever the attempts before it
    last = q(
        db,
        "select count(*), count(distinct (deployment, workload, concurrency, trial)) "
        "from marts.fct_trials where run_id = ? and trial > 0 and is_valid",
        [run_id],
    )[0]
    assert last[0] == last[1] == 3 * 2 * 5 * TWIN_TRIALS
    # aggregate throughput is not concurrency x median (the study's point)
    rows = q(
        db,
        "select aggregate_tok_s, concurrency_x_median_tok_s from marts.fct_trials "
        "where run_id = ? and concurrency = 16",
        [run_id],
    )
    assert all(a != pytest.approx(b, rel=1e-6) for a, b in rows)


def test_marts_contract_columns(night: tuple[Path, str]) -> None:
    db, _ = night
    contract = {
        "fct_stream_rates": "request_id, run_id, deployment, workload, concurrency, trial, status, "
        "completion_tokens, decode_tok_s, ttft_s",
        "fct_trials": "run_id, deployment, workload, concurrency, trial, median_decode_tok_s, "
        "min_decode_tok_s, aggregate_tok_s, median_ttft_s, effective_concurrency, "
        "is_valid, invalid_reasons",
        "fct_levels": "run_id, deployment, workload, concurrency, n_valid_trials, "
        "median_decode_tok_s, min_decode_tok_s, aggregate_tok_s, median_ttft_s, "
        "ci_low_tok_s, ci_high_tok_s, passes_threshold",
        "fct_capacity": "run_id, deployment, workload, threshold_tok_s, capacity_streams, "
        "first_failing_level, capacity_interpolated, is_lower_bound, "
        "ci_low_streams, ci_high_streams",
        "fct_fleet_capacity": "run_id, workload, capacity_streams, n_deployments, is_extrapolated",
        "dim_deployments": "model, endpoint, nodes, hardware, replicas",
    }
    for table, cols in contract.items():
        q(db, f"select {cols} from marts.{table} limit 1")


def test_incremental_build_processes_only_the_new_night(
    night: tuple[Path, str], tmp_path: Path
) -> None:
    src, night1 = night
    db = copy_of(src, tmp_path)
    # mark night 1's stored results: an incremental build must not recompute them
    with duckdb.connect(str(db)) as con:
        con.execute(
            "update intermediate.int_levels set median_decode_tok_s = -1 where run_id = ?", [night1]
        )
    with SimServer([fast_profile("m")]) as sim:
        req = SweepRequest(
            deployment=dep(sim.endpoint, "m"),
            workload="code",
            plan=SweepPlan(levels=(1, 2), trials=1, max_tokens=12, max_remeasures=0),
        )
        night2 = asyncio.run(run_sweeps([req], db)).run_id
    # what the test reads (int_levels, fct_capacity) with everything they are built from: the
    # incremental models a night's build runs on its way to the capacities, not a whole build
    build(db, select=CAPACITY)
    untouched = q(
        db,
        "select count(*) from intermediate.int_levels where run_id = ? "
        "and median_decode_tok_s = -1",
        [night1],
    )[0][0]
    assert untouched > 0
    assert q(db, "select count(*) from marts.fct_capacity where run_id = ?", [night2])[0][0] == 1
    # a full refresh recomputes everything it builds
    build(db, full_refresh=True, select=CAPACITY)
    assert (
        q(db, "select count(*) from intermediate.int_levels where median_decode_tok_s = -1")[0][0]
        == 0
    )


CAPACITY_ROWS = (
    "select deployment, workload, capacity_streams, threshold_tok_s, judgement_settings "
    "from marts.fct_capacity where run_id = ? order by deployment, workload"
)


@dataclass(frozen=True)
class At35:
    db: Path  # a copy of the twin night
    run_id: str
    at20: list[tuple[object, ...]]  # its capacities as the night built them
    build: CompletedProcess[str]  # `sparkcap build --threshold 35 --unit-tests` on the copy
    n_unit_tests: list[int]  # of each dbt build that command ran


@pytest.fixture(scope="module")
def at_35(night: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> At35:
    """One whole build, two promises (a build apiece would cost a whole build each): the
    nights built at 20 rebuilt at another threshold, and the formulas' dbt unit tests at a
    threshold other than the project's, asked for as a person does."""
    from sparkcap.transform import dbt_build

    src, run_id = night
    db = copy_of(src, tmp_path_factory.mktemp("at35"))
    at20 = q(db, CAPACITY_ROWS, [run_id])
    results: list[dbt_build.BuildResult] = []
    real = dbt_build.build

    def kept(*args: Any, **kwargs: Any) -> dbt_build.BuildResult:
        results.append(real(*args, **kwargs))
        return results[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dbt_build, "build", kept)
        for k, v in RELAXED_TIMING.items():  # as the twin night was built
            mp.setenv(k, v)
        p = cli_in_process("build", "--db", str(db), "--threshold", "35", "--unit-tests")
    return At35(db, run_id, at20, p, [r.n_unit_tests for r in results])


@pytest.mark.reliability
def test_a_changed_threshold_reaches_every_night_already_built(at_35: At35) -> None:
    """`sparkcap build --threshold 35` rebuilds the nights built at 20; building at 20 again
    restores them. The settings each capacity was computed with are on its row."""
    db, run_id, p = at_35.db, at_35.run_id, at_35.build
    assert p.returncode == 0, p.stderr
    at35 = q(db, CAPACITY_ROWS, [run_id])
    assert all(r[3] == 35 and "threshold_tok_s=35.0;" in r[4] for r in at35)
    assert q(db, "select count(*) from intermediate.int_levels where threshold_tok_s <> 35") == [
        (0,)
    ]
    glm = {(r[0], r[1]): r[2] for r in at35}
    assert glm[("glm", "code")] < 4  # 21 tok/s at four streams passes 20, not 35
    # back at 20: what the test reads (fct_capacity, int_levels) and what they are built from,
    # not a whole build; the unit tests that sit on those models run only when a build asks
    # for them (`unit_tests`)
    nightly = build(db, select=CAPACITY)
    assert nightly.n_unit_tests == 0  # a nightly build leaves the unit tests out
    assert q(db, CAPACITY_ROWS, [run_id]) == at_35.at20


def test_dbt_unit_tests_of_every_formula_pass(at_35: At35) -> None:
    """The formulas' dbt unit tests, once per suite (nightly builds leave them out), asked for
    as a person does (`sparkcap build --unit-tests`) and at a threshold other than the
    project's: each pins the vars it needs, so none may depend on the night's. (dbt needs
    their models built to know the input columns: the twin night's copy has them.)"""
    assert at_35.build.returncode == 0, at_35.build.stderr
    assert [n >= 70 for n in at_35.n_unit_tests] == [True]  # every unit test ran (71 of them)


def test_the_cli_prints_what_the_marts_say(
    night: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI applies no capacity rule of its own: at any threshold (15 here) every capacity
    it prints is marts.fct_capacity's. The run also holds probe waves: never mixed in."""
    import io
    import re

    from rich.console import Console

    from sparkcap import cli
    from sparkcap.publish import terminal
    from sparkcap.publish.night import read_night

    src, run_id = night
    assert (
        q(src, "select count(*) from raw.waves where run_id = ? and probe is not null", [run_id])[
            0
        ][0]
        == 4  # fleets/twin.yaml: three prefill-interference probes and one prompt-cache
    )
    db = copy_of(src, tmp_path)
    # what print_levels reads, with what it is built from (the copy's other marts stay at 20)
    build(db, select=PRINTED, dbt_vars={"threshold_tok_s": 15})
    buf = io.StringIO()
    monkeypatch.setattr(cli, "out", Console(file=buf, width=200))
    terminal.print_levels(cli.out, sys.stdout, read_night(db, run_id))
    printed = {
        (m["dep"], m["wl"]): int(m["cap"])
        for m in re.finditer(
            r"capacity at 15 tok/s — (?P<dep>\w+)/(?P<wl>\w+): \D*(?P<cap>\d+) stream",
            buf.getvalue(),
        )
    }
    marts = {
        (d, w): c
        for d, w, c in q(
            db,
            "select deployment, workload, capacity_streams from marts.fct_capacity "
            "where run_id = ?",
            [run_id],
        )
    }
    assert printed == marts and len(printed) == 6
    assert marts != {
        (d, w): c
        for d, w, c in q(
            src,
            "select deployment, workload, capacity_streams from marts.fct_capacity "
            "where run_id = ?",
            [run_id],
        )
    }  # 15 tok/s is a different answer than 20: the test can tell the two apart


def _searched_level_waves(run_id: str) -> list[WaveRecord]:
    """A search's counted waves at two and four streams, three trials each, with spread rates
    (a stream decodes 101 tokens at its rate, all streams of a wave at once), the search's
    decision on each level's last wave at confidence 0.9."""
    rates = {
        2: [[31.0, 24.5], [28.0, 35.5], [22.0, 30.5]],
        4: [[21.5, 18.0, 26.0, 19.5], [23.5, 17.0, 20.5, 25.0], [18.5, 22.5, 27.5, 16.0]],
    }
    waves: list[WaveRecord] = []
    for step, (concurrency, trials) in enumerate(rates.items(), start=1):
        for trial, trial_rates in enumerate(trials, start=1):
            wave = wave_record(
                concurrency,
                trial,
                run_id=run_id,
                started_at_ns=1_700_000_000_000_000_000 + step * 10**11 + trial * 10**10,
                method="search",
                search_step=step,
            )
            for rate in trial_rates:
                add_ok_stream(wave, 101, 100_000_000, 100_000_000 + decode_ns(101, rate))
            if trial == len(trials):
                wave.search_decision = SearchDecision(
                    kind="level",
                    search_step=step,
                    concurrency=concurrency,
                    n_trials=len(trials),
                    n_valid_trials=len(trials),
                    confidence=0.9,
                    trials_max=len(trials),
                    median_tok_s=None,
                    ci_low_tok_s=None,
                    ci_high_tok_s=None,
                    verdict="straddles",
                    stop_reason="trials-max",
                    next_action="stop",
                )
            waves.append(wave)
    return waves


def test_a_searched_levels_interval_is_one_bootstrap_everywhere(db_path: Path) -> None:
    """fct_levels' 90 % interval of a searched level is the interval int_search_levels and the
    live judge give the same trials: one bootstrap (macros/level_bootstrap.sql), not a second
    implementation that hashes, orders or picks its bounds its own way."""
    run_id = "20260101T000000Z-search"
    run_start_to(db_path, run_id, {}, time.time_ns())
    waves = _searched_level_waves(run_id)
    for wave in waves:
        stage_wave_to(db_path, wave)
    run_end_to(db_path, run_id, "complete")
    build(db_path, select="+fct_levels +int_search_levels")  # the two it reads, not a night's
    rows = q(
        db_path,
        "select l.concurrency, l.n_valid_trials, l.ci_low_tok_s, l.ci_high_tok_s, "
        "s.ci_low_tok_s, s.ci_high_tok_s, l.median_decode_tok_s, s.median_decode_tok_s "
        "from marts.fct_levels as l join intermediate.int_search_levels as s "
        "using (run_id, deployment, workload, concurrency) "
        "where l.run_id = ? and s.kind = 'level' order by l.concurrency",
        [run_id],
    )
    assert [(r[0], r[1]) for r in rows] == [(2, 3), (4, 3)]  # every trial counted
    judge = SearchJudge.compile(20.0)
    for concurrency, _, low, high, search_low, search_high, median, search_median in rows:
        assert low < median < high  # a real interval, not a degenerate one
        assert (low, high, median) == (search_low, search_high, search_median), concurrency
        live = judge.judge(
            level_key(run_id, "d", "code", int(str(concurrency)), "level"),
            [w for w in waves if w.concurrency == concurrency],
            0.9,
        )
        assert (live.ci_low_tok_s, live.ci_high_tok_s) == (low, high), concurrency


def test_a_broken_column_rule_names_its_rule_and_column(tmp_path: Path) -> None:
    """One data test holds a model's column rules (column_rules): a run whose raw status no
    rule accepts fails the build, and the message names the rule, the column and the rows
    (dbt's own "Got 1 result" would not say which of stg_runs' rules broke)."""
    from sparkcap.errors import BuildError

    db = tmp_path / "w.duckdb"
    run_id = "20261204T000000Z-bad"
    run_start_to(db, run_id, {}, time.time_ns())
    with duckdb.connect(str(db)) as con:
        con.execute("update raw.runs set status = 'half-done'")
    with pytest.raises(BuildError) as failed:
        build(db, select="stg_runs")
    assert "stg_runs_column_rules: accepted_values run_status: 1 rows" in str(failed.value)
