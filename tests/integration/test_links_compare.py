"""Link health with a real iperf3 on loopback, and the before/after comparison. (A report's
comparison with the previous run: ``test_probes.py``, on the runs its reports read.)"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from sparkcap.config.fleet import load_fleet
from sparkcap.night.sweeps import run_link_check
from sparkcap.publish.compare import compare
from sparkcap.transform.dbt_build import build
from tests.change_nights import History, Night, stage_history
from tests.support.cli import cli_in_process
from tests.support.fleets import write_fleet
from tests.support.queries import q
from tests.support.servers import free_port

pytestmark = pytest.mark.integration


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
        write_fleet(path, fleet)
        run_id, results = run_link_check(load_fleet(path), db_path)
    finally:
        server.kill()
        server.wait()
    by = {r.spec.name: r for r in results}
    assert by["lo"].achieved_gbps is not None and by["lo"].achieved_gbps > 1.0
    assert by["fast"].achieved_gbps == 12.5
    assert by["broken"].achieved_gbps is None and by["broken"].error
    # raw keeps the measurement; the judgement is dbt's alone (its share/healthy stay NULL)
    raw = q(
        db_path,
        "select link, nominal_gbps, min_share, share, healthy from raw.link_tests "
        "where run_id = ? order by link",
        [run_id],
    )
    assert raw == [
        ("broken", 200.0, 0.8, None, None),
        ("fast", 1_000_000.0, 0.8, None, None),
        ("lo", 1.0, 0.8, None, None),
    ]
    build(db_path, select="+fct_link_health +fct_step_outcomes")
    rows = q(
        db_path,
        "select link, healthy, share_of_nominal, error is not null from marts.fct_link_health "
        "where run_id = ? order by link",
        [run_id],
    )
    assert [r[:2] for r in rows] == [("broken", False), ("fast", False), ("lo", True)]
    assert rows[0][2] is None and rows[0][3]  # nothing measured: unhealthy, the error kept
    assert rows[1][2] == 12.5 / 1_000_000.0
    assert by["lo"].achieved_gbps == pytest.approx(rows[2][2])  # nominal 1 Gb/s
    # a link check that could not measure is a named gap of the night, not a silent one
    gaps = q(
        db_path,
        "select step, outcome, reason from marts.fct_step_outcomes where run_id = ? and is_failed",
        [run_id],
    )
    assert len(gaps) == 1 and gaps[0][:2] == ("link-check", "link-check failed")
    assert gaps[0][2].startswith("broken: ")


def test_compare_two_runs(db_path: Path) -> None:
    """Two nights staged in model time, the second 60 % slower at every level and both with
    capacity 2: compare says so. (Staged, not swept: in two live sweeps of 30-token streams
    one stall of a starved test process in one wave can read the fast night's level 2 below
    the slow one's.)"""
    slower = History.exact("m", [Night(), Night(speed=0.4)], {1: 120.0, 2: 100.0})
    runs = stage_history(db_path, slower, seed=35)
    # the marts compare reads (sparkcap/publish/compare.py), not a night's whole build
    reads = "+fct_levels +fct_capacity +fct_prefill_interference +fct_link_health +fct_changes"
    build(db_path, select=reads)
    out = compare(db_path, runs[0], runs[1])
    levels = out["levels"]
    assert list(levels["concurrency"]) == [1, 2]
    assert list(levels["median_change_pct"]) == pytest.approx([-60.0, -60.0], abs=0.1), levels
    assert list(out["capacity"]["capacity_change"]) == [0]
    with pytest.raises(LookupError, match="no such run"):
        compare(db_path, runs[0], "nope")
    import json

    p = cli_in_process("compare", runs[0], runs[1], "--db", str(db_path), "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)  # machine-readable: the same figures as the frames
    assert doc["before"] == runs[0] and doc["after"] == runs[1]
    assert [r["concurrency"] for r in doc["levels"]] == [1, 2]
