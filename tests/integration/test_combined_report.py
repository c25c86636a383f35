"""Hand-made sweeps in separate runs read as one report (issue 17).

Two deployments swept by hand, each in its own run, then one of them again in a third:
`sparkcap report --run A --run B --run C` (and `--night` for the day they ran) gives one
page whose headline is the fleet formula over the newest measurement of each deployment,
read from the marts, never summed in Python.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest

from sparkcap.config import SweepPlan, SweepRequest
from sparkcap.night.sweeps import run_sweeps
from sparkcap.servers.sim.server import SimServer
from sparkcap.transform.dbt_build import build
from tests.integration.helpers import SHORT_STREAM_VARS, cli_in_process, dep, fast_profile

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def one_run(db: Path, endpoint: str, model: str, levels: tuple[int, ...]) -> str:
    plan = SweepPlan(levels=levels, trials=1, warmup=False, max_tokens=30, max_remeasures=0)
    req = SweepRequest(deployment=dep(endpoint, model), workload="code", plan=plan)
    return asyncio.run(run_sweeps([req], db)).run_id


def test_runs_of_hand_made_sweeps_read_as_one_report(tmp_path: Path) -> None:
    db = tmp_path / "adhoc.duckdb"
    with SimServer([fast_profile("a"), fast_profile("b")]) as sim:
        run_a = one_run(db, sim.endpoint, "a", (1, 2))
        run_b = one_run(db, sim.endpoint, "b", (1, 2, 4))
        run_c = one_run(db, sim.endpoint, "a", (1,))  # a again, later: the newest counts
    build(db, dbt_vars=SHORT_STREAM_VARS)
    runs = [run_a, run_b, run_c]
    with duckdb.connect(str(db), read_only=True) as con:
        picked = con.execute(
            "select deployment, run_id, capacity_streams from marts.capacity_of(?) "
            "order by deployment",
            [runs],
        ).fetchall()
        own = dict(
            con.execute(
                "select deployment, capacity_streams from marts.fct_capacity "
                "where (deployment, run_id) in (('a', ?), ('b', ?))",
                [run_c, run_b],
            ).fetchall()
        )
        fleet = con.execute(
            "select capacity_streams, n_deployments, is_complete "
            "from marts.fleet_capacity_of(?) where workload = 'code'",
            [runs],
        ).fetchall()
        day = con.execute(
            "select cast(timezone('UTC', started_at) as date) from raw.runs where run_id = ?",
            [run_a],
        ).fetchall()[0][0]
    assert [(d, r) for d, r, _ in picked] == [("a", run_c), ("b", run_b)]
    assert fleet == [(own["a"] + own["b"], 2, True)]

    out = tmp_path / "reports"
    args = ["report", "--db", str(db), "--out", str(out)]
    done = cli_in_process(*args, "--run", run_a, "--run", run_b, "--run", run_c)
    assert done.returncode == 0, done.stderr[-2000:]
    (index,) = out.glob("combined-3-runs-*/index.html")
    page = index.read_text(encoding="utf-8")
    assert "Runs in this report" in page
    assert all(r in page for r in runs)
    assert f"<b>≈ {own['a'] + own['b']} code streams</b>" in page

    if day == datetime.now(UTC).date():  # the runs did not straddle midnight UTC
        done = cli_in_process(*args, "--night", day.isoformat())
        assert done.returncode == 0, done.stderr[-2000:]
        night_page = (out / f"night-{day.isoformat()}" / "index.html").read_text()
        assert f"<b>≈ {own['a'] + own['b']} code streams</b>" in night_page

    bad = cli_in_process(*args, "--run", run_a, "--run", "no-such-run")
    assert bad.returncode != 0
    assert bad.stderr.strip().splitlines()[-1].startswith("error: no run no-such-run")
    both = cli_in_process(*args, "--run", run_a, "--night", "2026-01-01")
    assert both.returncode != 0 and "--run or --night" in both.stderr
    empty = cli_in_process(*args, "--night", "1999-01-01")
    assert empty.returncode != 0 and "no built run started on 1999-01-01" in empty.stderr
