"""A tiny sweep against the simulator: each deployment's declared facts reach
raw.deployment_facts when the run records its deployments, discovery runs beside them, and
dbt's int_deployment_facts has one row per run × deployment with the declared values and
their sources (a deployment that failed preflight included), and what discovery found in a
served GGUF for a deployment that declares no fact."""

from __future__ import annotations

import asyncio
from pathlib import Path

import duckdb
import pytest

from sparkcap.config.deployment import Deployment
from sparkcap.config.plan import SweepPlan, SweepRequest
from sparkcap.night.sweeps import run_sweeps
from sparkcap.servers.sim.server import SimServer
from sparkcap.transform.dbt_build import build
from tests.support.queries import q
from tests.support.sims import fast_profile
from tests.unit.loadgen.test_gguf import gguf_bytes

pytestmark = pytest.mark.integration

DECLARED = {
    "engine": "sim",
    "memory_bandwidth_gb_s": 273,
    "weight_bytes": 5e8,
    "layers": 18,
    "kv_heads": 1,
    "head_dim": 256,
    "context_tokens": 4096,
}


SERVED_GGUF = [
    ("general.architecture", 8, "llama"),
    ("llama.block_count", 4, 16),
    ("llama.attention.head_count", 4, 8),
    ("llama.attention.head_count_kv", 4, 2),
    ("llama.attention.key_length", 4, 64),
    ("llama.attention.value_length", 4, 64),
]


def test_declared_facts_reach_int_deployment_facts(db_path: Path, tmp_path: Path) -> None:
    plan = SweepPlan(levels=(1,), trials=1, warmup=False, max_tokens=6, max_remeasures=0)
    profiles = [fast_profile("m"), fast_profile("n"), fast_profile("l", metric_style="llamacpp")]
    with SimServer(profiles) as sim:
        told = Deployment(
            name="told",
            model="m",
            endpoint=sim.endpoint,  # type: ignore[arg-type]
            nodes=2,
            parallel_slots=4,
            facts=DECLARED,  # type: ignore[arg-type]
        )
        served = tmp_path / "n.gguf"  # what 'silent' serves: only its GGUF says anything
        served.write_bytes(gguf_bytes(SERVED_GGUF))
        silent = Deployment(
            name="silent",
            model="n",
            endpoint=sim.endpoint,  # type: ignore[arg-type]
            facts={"gguf_path": served},  # type: ignore[arg-type]
        )
        gone = Deployment(
            name="gone",
            model="m",
            endpoint="http://127.0.0.1:9/v1",  # type: ignore[arg-type]
            facts={"memory_bandwidth_gb_s": 100, "nodes_per_replica": 3},  # type: ignore[arg-type]
        )
        # says what it is the way llama-server does: /v1/models' owned_by and meta, /props
        llama = Deployment(name="llama", model="l", endpoint=sim.endpoint)  # type: ignore[arg-type]
        deps = (told, silent, gone, llama)
        reqs = [SweepRequest(deployment=d, workload="code", plan=plan) for d in deps]
        run_id = asyncio.run(run_sweeps(reqs, db_path)).run_id
    build(db_path, select="+int_deployment_facts")
    raw = q(
        db_path,
        "select deployment, fact, coalesce(text_value, value::varchar) "
        "from raw.deployment_facts where run_id = ? and source = 'declared' order by all",
        [run_id],
    )
    with duckdb.connect(str(db_path), read_only=True) as con:
        rows = con.execute(
            "select * from intermediate.int_deployment_facts where run_id = ? order by deployment",
            [run_id],
        )
        names = [c[0] for c in rows.description]
        got = {
            r[names.index("deployment")]: dict(zip(names, r, strict=True)) for r in rows.fetchall()
        }
    assert ("told", "kv_bytes_per_token", str(18 * 1 * 256 * 2 * 2.0)) in raw
    assert ("told", "server_slots", "4.0") in raw and ("told", "engine", "sim") in raw
    assert set(got) == {"told", "silent", "gone", "llama"}
    told_row = got["told"]
    assert told_row["engine"] == "sim" and told_row["engine_source"] == "declared"
    assert told_row["memory_bandwidth_bytes_s"] == 273e9
    assert told_row["memory_bandwidth_bytes_s_source"] == "declared"
    assert told_row["nodes_per_replica"] == 2
    assert told_row["nodes_per_replica_source"] == "nodes-over-replicas"
    assert told_row["replica_bandwidth_bytes_s"] == 546e9
    assert (told_row["weight_bytes"], told_row["weight_bytes_source"]) == (5e8, "declared")
    assert told_row["kv_bytes_per_token"] == 18432.0
    assert told_row["kv_bytes_per_token_source"] == "declared"
    assert (told_row["context_tokens"], told_row["context_tokens_source"]) == (4096, "declared")
    assert (told_row["server_slots"], told_row["server_slots_source"]) == (4, "declared")
    assert told_row["moe_experts"] is None and told_row["moe_experts_source"] is None
    gone_row = got["gone"]  # failed preflight: recorded, declared facts kept, nothing discovered
    assert gone_row["replica_bandwidth_bytes_s"] == 300e9
    assert (gone_row["nodes_per_replica"], gone_row["nodes_per_replica_source"]) == (3, "declared")
    assert gone_row["discovery_problems"] is None
    silent_row = got["silent"]  # declared no fact: what it has, discovery found
    assert silent_row["nodes_per_replica"] == 1 and silent_row["memory_bandwidth_bytes_s"] is None
    assert silent_row["kv_bytes_per_token"] == 16 * 2 * (64 + 64) * 2
    assert silent_row["kv_bytes_per_token_source"] == "gguf"
    sources = {v for k, v in silent_row.items() if k.endswith("_source") and v is not None}
    assert sources <= {
        "gguf",
        "llama-props",
        "llama-models-meta",
        "vllm-models",
        "models-owned-by",
        "nodes-over-replicas",
    }
    llama_row = got["llama"]  # /props (what the server runs with) wins over meta.n_ctx_train
    assert (llama_row["engine"], llama_row["engine_source"]) == ("llamacpp", "models-owned-by")
    assert llama_row["context_tokens_source"] == "llama-props"
    assert llama_row["server_slots_source"] == "llama-props" and llama_row["server_slots"] >= 1
