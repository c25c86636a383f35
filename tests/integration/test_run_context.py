"""What can change a number between nights reaches int_run_context: a sweep of the simulator,
then a second run against the same port after the server restarted with a newer engine. Both
runs' rows name their engine version (vLLM's /version; llama-server's /props build_info),
the second server's start is later, the unchanged settings hash the same, and a distributed
night's parent discovers the same facts before its children start."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import duckdb
import pytest

from sparkcap import __version__
from sparkcap.config.deployment import Deployment
from sparkcap.config.plan import SweepPlan, SweepRequest
from sparkcap.night import plan as night_plan
from sparkcap.night.distributed.parent import record_night_start
from sparkcap.night.sweeps import run_sweeps
from sparkcap.servers.sim.server import SimServer
from sparkcap.settings import get_settings
from sparkcap.transform.dbt_build import build
from tests.support.fleets import write_fleet
from tests.support.queries import q
from tests.support.sims import fast_profile

pytestmark = pytest.mark.integration

PLAN = SweepPlan(levels=(1,), trials=1, warmup=False, max_tokens=4, max_remeasures=0)


def _night(port: int, db_path: Path, vllm_version: str) -> str:
    profiles = [
        fast_profile("v", metric_style="vllm", engine_version=vllm_version),
        fast_profile("l", metric_style="llamacpp", engine_version="b6000-1a2b3c4"),
    ]
    with SimServer(profiles, port=port) as sim:
        deps = [Deployment(name=n, model=n, endpoint=sim.endpoint) for n in ("v", "l")]
        reqs = [SweepRequest(deployment=d, workload="code", plan=PLAN) for d in deps]
        return asyncio.run(run_sweeps(reqs, db_path)).run_id


def _context(db_path: Path) -> dict[tuple[str, str], dict[str, object]]:
    with duckdb.connect(str(db_path), read_only=True) as con:
        rel = con.execute("select * from intermediate.int_run_context")
        names = [c[0] for c in rel.description]
        return {(r[0], r[1]): dict(zip(names, r, strict=True)) for r in rel.fetchall()}


def test_a_restarted_server_with_a_new_engine_shows_in_int_run_context(
    db_path: Path, tmp_path: Path
) -> None:
    with SimServer([fast_profile("v")]) as probe:  # a free port both servers then bind
        port = probe.port
    first = _night(port, db_path, "0.11.2")
    second = _night(port, db_path, "0.12.0")
    build(db_path, select="+int_run_context")
    rows = _context(db_path)
    assert set(rows) == {(first, "v"), (first, "l"), (second, "v"), (second, "l")}
    a, b = rows[(first, "v")], rows[(second, "v")]
    assert (a["engine"], a["engine_version"], b["engine_version"]) == ("vllm", "0.11.2", "0.12.0")
    assert a["engine_version_source"] == b["engine_version_source"] == "vllm-version"
    assert a["server_started_at"] is not None and b["server_started_at"] is not None
    assert b["server_started_at"] > a["server_started_at"]  # type: ignore[operator]
    llama = rows[(first, "l")]
    assert (llama["engine_version"], llama["engine_version_source"]) == (
        "b6000-1a2b3c4",
        "llama-props",
    )
    assert (a["model_id"], a["model_id_source"]) == ("v", "models-listing")
    # the same deployment at the same endpoint: the same settings, the same hash
    assert re.fullmatch(r"[0-9a-f]{16}", str(a["settings_hash"]))
    assert a["settings_hash"] == b["settings_hash"] != llama["settings_hash"]
    assert a["client_host"] == get_settings().client_host
    assert a["sparkcap_version"] == __version__
    assert str(a["judgement_settings"]).startswith("rules=")
    assert a["run_started_at"] < b["run_started_at"]  # type: ignore[operator]


def test_a_distributed_parent_discovers_before_its_children(db_path: Path, tmp_path: Path) -> None:
    with SimServer([fast_profile("v", metric_style="vllm", engine_version="0.10.1")]) as sim:
        fleet_path = tmp_path / "fleet.yaml"
        write_fleet(
            fleet_path,
            {
                "name": "one",
                "workloads": {"code": {"levels": [1], "trials": 1, "warmup": False}},
                "deployments": [{"name": "v", "model": "v", "endpoint": sim.endpoint}],
                "distributed": {"enabled": True, "lake": str(tmp_path / "lake")},
            },
        )
        fleet = night_plan.fleet_for(fleet_path)
        night = night_plan.Night(fleet, db_path, tmp_path / "reports", distributed=True)
        record_night_start(night, "r1", "2026-11-30", str(tmp_path / "lake"))
    got = dict(
        q(
            db_path,
            "select fact, coalesce(text_value, value::varchar) from raw.deployment_facts "
            "where run_id = 'r1' and fact in ('engine_version', 'model_id', 'settings_hash')",
        )
    )
    assert got["engine_version"] == "0.10.1" and got["model_id"] == "v"
    assert re.fullmatch(r"[0-9a-f]{16}", got["settings_hash"])
