"""A distributed night whose parent died is finished from its lake by ``run --finish``.

The children are stood in for by what they leave in the lake (waves, manifests, their status
and heartbeat files), written by real sweeps against the simulator: one child finished, one
landed a wave and went silent (its host died), one never started. No Prefect server is needed
to finish: the statuses say how each child ended.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path

import pytest

from sparkcap.config.plan import SweepPlan
from sparkcap.loadgen.sweep import new_run_id, run_sweep
from sparkcap.night import plan as night_plan
from sparkcap.night.distributed.parent import record_night_start
from sparkcap.servers.sim.server import SimServer
from sparkcap.store.lake import ChildKey, Lake
from tests.support.cli import cli_in_process
from tests.support.fleets import write_fleet
from tests.support.queries import q
from tests.support.sims import dep, fast_profile

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DAY = "2026-11-30"
NAMES = ("alpha", "bravo", "charlie")


def _fleet(base: Path, endpoint: str) -> Path:
    fleet = {
        "name": "three",
        "threshold_tok_s": 20,
        "workloads": {"code": {"levels": [1, 2], "trials": 1, "warmup": False, "max_tokens": 40}},
        "deployments": [
            {"name": n, "model": n, "endpoint": endpoint, "extra_body": {"ignore_eos": True}}
            for n in NAMES
        ],
        "distributed": {"enabled": True, "lake": str(base / "lake"), "stall_s": 120},
    }
    # a probe the finish cannot run: it would measure the fleet now, not that night
    fleet["deployments"][0]["probes"] = {"output-length": {}}  # type: ignore[index]
    return write_fleet(base / "three.yaml", fleet)


def _land(lake: Lake, key: ChildKey, endpoint: str, waves: int | None = None) -> int:
    """A child's sweep into the lake, as ``sweep_child`` lands it; ``waves`` stops after that
    many (the child died). Returns how many landed."""
    landed: list[str] = []

    async def on_wave(wave: object) -> None:
        if waves is None or len(landed) < waves:
            lake.write_wave(key, wave)  # type: ignore[arg-type]
            landed.append(key.deployment)

    plan = SweepPlan(levels=(1, 2), trials=1, warmup=False, max_tokens=40)
    target = dep(endpoint, key.deployment, extra_body={"ignore_eos": True})
    asyncio.run(run_sweep(target, "code", plan, key.run_id, on_wave=on_wave))
    return len(landed)


def _count(db: Path, sql: str, params: list[object]) -> int:
    rows = q(db, sql, params)
    return int(rows[0][0]) if rows else 0


def test_finish_names_lost_and_unstarted_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("SPARKCAP_HOME", str(home))
    env = {**os.environ, "SPARKCAP_HOME": str(home), "PREFECT_API_URL": ""}
    db, reports = tmp_path / "night.duckdb", tmp_path / "reports"
    run_id = new_run_id()
    with SimServer([fast_profile(n, draft_tokens=0) for n in NAMES]) as sim:
        fleet_path = _fleet(tmp_path, sim.endpoint)
        fleet = night_plan.fleet_for(fleet_path)
        url = str(tmp_path / "lake")
        night = night_plan.Night(fleet, db, reports, run_id=run_id, distributed=True)
        record_night_start(night, run_id, DAY, url)  # what the parent did first
        lake = Lake(url)
        key = {n: ChildKey(DAY, run_id, n, "code") for n in NAMES}
        # alpha finished on host-a; bravo landed one wave on host-b, then its host died
        n_alpha = _land(lake, key["alpha"], sim.endpoint)
        lake.write_status(key["alpha"], state="ok", reason=None, host="host-a", waves=n_alpha)
        assert _land(lake, key["bravo"], sim.endpoint, waves=1) == 1
        lake.write_status(key["bravo"], state="running", reason=None, host="host-b", waves=1)
        lake.heartbeat(key["bravo"])
    finish = ("run", "--fleet", str(fleet_path), "--db", str(db), "--reports", str(reports))

    # bravo's heartbeat is fresh: it may still be sweeping, so nothing is staged yet
    p = cli_in_process(*finish, "--finish", run_id, "--no-prefect", env=env)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "bravo/code of run" in p.stderr and "still running on host-b" in p.stderr
    assert "Traceback" not in p.stderr and p.stderr.count("error:") == 1
    assert _count(db, "select count(*) from raw.waves where run_id = ?", [run_id]) == 0

    # ten minutes of silence: bravo is lost; charlie never left a status
    heartbeat = Path(url) / "manifests" / key["bravo"].partition / "child-code.heartbeat"
    heartbeat.write_text(str(time.time() - 600))
    p = cli_in_process(*finish, "--finish", run_id, "--no-prefect", env=env)
    assert p.returncode == 1, p.stdout + p.stderr
    lost = r"bravo not measured: code: lost \(no heartbeat for 6\d\d s from client host host-b"
    assert re.search(lost, p.stderr), p.stderr
    assert "charlie not measured: code: never started (no status in the lake" in p.stderr
    assert "alpha not measured" not in p.stderr
    assert f"run {run_id} is incomplete" in p.stderr
    assert "night probes failed: not run: the night was finished from its lake" in p.stderr
    # every landed wave staged once; alpha's capacity built; the report names the losses
    waves = _count(db, "select count(*) from raw.waves where run_id = ?", [run_id])
    assert waves == n_alpha + 1
    assert (
        _count(
            db,
            "select count(*) from marts.fct_capacity where run_id = ? and deployment = 'alpha'",
            [run_id],
        )
        == 1
    )
    assert (
        _count(
            db, "select count(*) from raw.runs where run_id = ? and status = 'incomplete'", [run_id]
        )
        == 1
    )
    html = (reports / run_id / "index.html").read_text()
    assert "host-b" in html and "never started" in html

    # a run the database does not know: one line, nothing written
    p = cli_in_process(*finish, "--finish", "20261130T000000Z-000000", "--no-prefect", env=env)
    assert p.returncode == 1 and "is not in" in p.stderr and "Traceback" not in p.stderr
