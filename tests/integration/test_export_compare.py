"""Three simulated nights built with dbt, then ``sparkcap export --prometheus`` and ``sparkcap
compare --fail-on regression`` through the in-process CLI: the textfile parses back with
prometheus-client to the marts' capacities (the latest built run by default, ``--run`` another),
and the gate passes two equal nights and fails (exit 3) a night whose engine is slower.

The engine's rates are built so the capacity at the default 20 tok/s moves well clear of noise:
one token per 20 ms step at one stream, each extra stream 40 % slower (2: 36, 4: 23, 8: 13
tok/s, capacity 4); the slow night's 30 ms step (2: 24, 4: 15 tok/s) sustains 2.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import duckdb
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkcap import cli
from sparkcap.config import SweepPlan, SweepRequest
from sparkcap.night.sweeps import run_sweeps
from sparkcap.servers.sim.server import SimServer
from sparkcap.transform.dbt_build import build
from tests.integration.helpers import SHORT_STREAM_VARS, dep, fast_profile

pytestmark = pytest.mark.integration

# what export (publish/export.py: read_night) and compare (publish/compare.py, its gate
# included) read, with every model they are built from: not a whole build
READ = (
    "+fct_capacity +fct_fleet_capacity +fct_capacity_tiers +fct_changes +fct_energy_at_capacity "
    "+fct_levels +fct_prefill_interference +fct_link_health"
)


def night(db: Path, step_s: float) -> str:
    profile = fast_profile("m", step_s1=step_s, batch_slowdown=0.4, draft_tokens=0)
    with SimServer([profile]) as sim:
        req = SweepRequest(
            deployment=dep(sim.endpoint, "m"),
            workload="code",
            plan=SweepPlan(levels=(2, 4, 8), trials=1, max_tokens=24, warmup=False),
        )
        return asyncio.run(run_sweeps([req], db)).run_id


def exported(path: Path) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    return {
        f.name: {tuple(sorted(s.labels.items())): s.value for s in f.samples}
        for f in text_string_to_metric_families(path.read_text(encoding="utf-8"))
    }


def exit_code(argv: list[str]) -> int:
    try:
        cli.main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_export_parses_back_and_compare_gates_a_slower_night(
    db_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, equal, slower = night(db_path, 0.02), night(db_path, 0.02), night(db_path, 0.03)
    build(db_path, select=READ, dbt_vars=SHORT_STREAM_VARS)
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
    assert exit_code(["export", "--prometheus", str(prom), *db]) == 0
    assert f"wrote {prom}: run {slower}" in capsys.readouterr().out
    got = exported(prom)
    pair = (("deployment", "m"), ("workload", "code"))
    at_20 = tuple(sorted((*pair, ("threshold_tok_s", "20"))))
    assert got["sparkcap_run_info"] == {(("run_id", slower),): 1.0}
    assert got["sparkcap_capacity_streams"] == {at_20: 2.0}
    assert got["sparkcap_capacity_measured"] == {pair: 1.0}
    assert list(prom.parent.iterdir()) == [prom]  # no temporary file left for the collector

    assert exit_code(["export", "--prometheus", str(prom), "--run", first, *db]) == 0
    assert exported(prom)["sparkcap_capacity_streams"] == {at_20: 4.0}
    capsys.readouterr()

    # a bad target: one error line, non-zero, the last good file kept
    assert exit_code(["export", "--prometheus", str(prom.parent), *db]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: cannot write {prom.parent}: it is a directory"]
    assert exported(prom)["sparkcap_capacity_streams"] == {at_20: 4.0}

    # the gate: equal nights pass, the slower one fails with exit 3 and says why
    assert exit_code(["compare", first, equal, "--fail-on", "regression", *db]) == 0
    assert "regression" not in capsys.readouterr().err
    assert exit_code(["compare", equal, slower, "--fail-on", "regression", *db]) == 3
    out = capsys.readouterr()
    assert "capacity" in out.out  # the comparison itself is printed as before
    lines = out.err.strip().splitlines()
    assert "regression: m/code capacity 2 streams, below 4 in " + equal in lines[0], lines
    assert lines[-1].startswith(f"error: run {slower} regressed against {equal}: ")
    # without --fail-on the comparison's exit status is unchanged
    assert exit_code(["compare", equal, slower, *db]) == 0
