"""Link health with a real iperf3 on loopback, and the before/after comparison. (A report's
comparison with the previous run: ``test_probes.py``, on the runs its reports read.)"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from pathlib import Path

import duckdb
import pytest
import yaml

from sparkcap.config import SweepPlan, SweepRequest
from sparkcap.config.fleet import load_fleet
from sparkcap.night.sweeps import run_link_check, run_sweeps
from sparkcap.publish.compare import compare
from sparkcap.servers.sim.server import SimServer
from sparkcap.transform.dbt_build import build
from tests.integration.helpers import SHORT_STREAM_VARS, cli_in_process, dep, fast_profile

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 not installed (.ci/run does)")
def test_link_check_with_real_iperf3(tmp_path: Path, db_path: Path) -> None:
    port = free_port()
    server = subprocess.Popen(
        ["iperf3", "-s", "-1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.5)
        fleet = {
            "name": "links",
            "workloads": {"code": {"levels": [1]}},
            "link_min_share": 0.8,
            "deployments": [
                {
                    "name": "ring",
                    "model": "m",
                    "endpoint": "http://127.0.0.1:9/v1",
                    "links": [
                        {
                            "name": "lo",
                            "a": "n1",
                            "b": "n2",
                            "nominal_gbps": 1.0,
                            "command": f"iperf3 -J -c 127.0.0.1 -p {port} -t 1",
                        },
                        # nominal far above what loopback gives: must be flagged
                        {
                            "name": "fast",
                            "nominal_gbps": 1_000_000.0,
                            "format": "plain",
                            "command": "echo gbps=12.5",
                        },
                        {"name": "broken", "nominal_gbps": 200.0, "command": "false"},
                    ],
                }
            ],
        }
        path = tmp_path / "links.yaml"
        path.write_text(yaml.safe_dump(fleet))
        run_id, results = run_link_check(load_fleet(path), db_path)
    finally:
        server.kill()
        server.wait()
    by = {r.spec.name: r for r in results}
    assert by["lo"].achieved_gbps is not None and by["lo"].achieved_gbps > 1.0
    assert by["fast"].achieved_gbps == 12.5
    assert by["broken"].achieved_gbps is None and by["broken"].error
    # raw keeps the measurement; the judgement is dbt's alone (its share/healthy stay NULL)
    with duckdb.connect(str(db_path), read_only=True) as con:
        raw = con.execute(
            "select link, nominal_gbps, min_share, share, healthy from raw.link_tests "
            "where run_id = ? order by link",
            [run_id],
        ).fetchall()
    assert raw == [
        ("broken", 200.0, 0.8, None, None),
        ("fast", 1_000_000.0, 0.8, None, None),
        ("lo", 1.0, 0.8, None, None),
    ]
    build(db_path, select="+fct_link_health +fct_step_outcomes")
    with duckdb.connect(str(db_path), read_only=True) as con:
        rows = con.execute(
            "select link, healthy, share_of_nominal, error is not null from marts.fct_link_health "
            "where run_id = ? order by link",
            [run_id],
        ).fetchall()
    assert [r[:2] for r in rows] == [("broken", False), ("fast", False), ("lo", True)]
    assert rows[0][2] is None and rows[0][3]  # nothing measured: unhealthy, the error kept
    assert rows[1][2] == 12.5 / 1_000_000.0
    assert by["lo"].achieved_gbps == pytest.approx(rows[2][2])  # nominal 1 Gb/s
    # a link check that could not measure is a named gap of the night, not a silent one
    with duckdb.connect(str(db_path), read_only=True) as con:
        gaps = con.execute(
            "select step, outcome, reason from marts.fct_step_outcomes where run_id = ? "
            "and is_failed",
            [run_id],
        ).fetchall()
    assert len(gaps) == 1 and gaps[0][:2] == ("link-check", "link-check failed")
    assert gaps[0][2].startswith("broken: ")


def test_compare_two_runs(db_path: Path) -> None:
    runs = []
    for step in (0.02, 0.05):  # the second night is much slower (−60 % by the model)
        with SimServer([fast_profile("m", step_s1=step)]) as sim:
            req = SweepRequest(
                deployment=dep(sim.endpoint, "m"),
                workload="code",
                plan=SweepPlan(levels=(1, 2), trials=1, max_tokens=30, max_remeasures=0),
            )
            runs.append(asyncio.run(run_sweeps([req], db_path)).run_id)
    # the marts compare reads (sparkcap/publish/compare.py), not a night's whole build
    reads = "+fct_levels +fct_capacity +fct_prefill_interference +fct_link_health +fct_changes"
    build(db_path, select=reads, dbt_vars=SHORT_STREAM_VARS)
    out = compare(db_path, runs[0], runs[1])
    levels = out["levels"]
    assert list(levels["concurrency"]) == [1, 2]
    assert (levels["median_change_pct"] < -25).all(), levels
    assert list(out["capacity"]["capacity_change"]) == [0]
    with pytest.raises(LookupError, match="no such run"):
        compare(db_path, runs[0], "nope")
    import json

    p = cli_in_process("compare", runs[0], runs[1], "--db", str(db_path), "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)  # machine-readable: the same figures as the frames
    assert doc["before"] == runs[0] and doc["after"] == runs[1]
    assert [r["concurrency"] for r in doc["levels"]] == [1, 2]
