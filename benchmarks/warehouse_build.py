"""Staging and dbt build at the size of a full night.

A night of 8 deployments × 2 workloads × levels 1..16 × 5 trials with 1000-token streams is
10,880 streams and 10.9 M chunk rows. The script synthesises such a night (no server), stages
it wave by wave (one transaction each, as a sweep does) and builds the marts; then adds a
history of earlier nights, stages one more full night and compares its incremental build
with a full rebuild of every night. Targets: staging ≥ 1 M chunk rows/s, full build
< 60 s on 2 cores, incremental build of one new night well under the full build.

    .venv/bin/python benchmarks/warehouse_build.py [--deployments 8] [--tokens 1000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa

from sparkcap.config.deployment import Deployment
from sparkcap.store.arrow_tables import chunk_table
from sparkcap.store.connection import open_warehouse
from sparkcap.store.runs import record_run_start
from sparkcap.store.staging import stage_tables
from sparkcap.transform.dbt_build import build


def night_waves(
    run_id: str,
    deployments: int,
    tokens: int,
    rng: np.random.Generator,
    levels: range = range(1, 17),
    trials: int = 5,
):
    """Yield (wave_id, tables) for one synthetic night, vectorised per wave."""
    for d in range(deployments):
        for workload in ("code", "prose"):
            for level in levels:
                for trial in range(1, trials + 1):
                    wid = f"{run_id}/dep{d}/{workload}/c{level:04d}/t{trial}"
                    rate = 60.0 / (1 + 0.2 * (level - 1)) * rng.uniform(0.9, 1.1, level)
                    dt_ns = (1e9 / rate).astype(np.int64)
                    sent = rng.integers(0, 1_000_000, level)
                    first = sent + rng.integers(50_000_000, 300_000_000, level)
                    last = first + dt_ns * (tokens - 1)
                    rids = [f"{wid}/s{i:03d}" for i in range(level)]
                    waves = pa.table(
                        {
                            "wave_id": [wid],
                            "run_id": [run_id],
                            "deployment": [f"dep{d}"],
                            "model": [f"model{d}"],
                            "endpoint": ["http://bench/v1"],
                            "workload": [workload],
                            "concurrency": pa.array([level], pa.int32()),
                            "trial": pa.array([trial], pa.int32()),
                            "started_at": pa.array(
                                [datetime.now(UTC)], pa.timestamp("us", tz="UTC")
                            ),
                            "timing_error_bound": [0.0],
                            "queued": [False],
                            "peak_concurrency": pa.array([level], pa.int32()),
                            "effective_concurrency": [float(level)],
                            "n_requests": pa.array([level], pa.int32()),
                            "staged_at": pa.array(
                                [datetime.now(UTC)], pa.timestamp("us", tz="UTC")
                            ),
                        }
                    )
                    n = level
                    requests = pa.table(
                        {
                            "request_id": rids,
                            "wave_id": [wid] * n,
                            "run_id": [run_id] * n,
                            "stream_index": pa.array(range(n), pa.int32()),
                            "prompt_id": [f"{workload}-{i % 16 + 1:02d}" for i in range(n)],
                            "requested_tokens": pa.array([tokens] * n, pa.int32()),
                            "required_tokens": pa.array([tokens] * n, pa.int32()),
                            "temperature": [0.0 if workload == "code" else 0.7] * n,
                            "sent_ns": sent,
                            "first_token_ns": first,
                            "last_token_ns": last,
                            "end_ns": last + 1000,
                            "completion_tokens": pa.array([tokens] * n, pa.int32()),
                            "prompt_tokens": pa.array([90] * n, pa.int32()),
                            "count_source": ["usage"] * n,
                            "finish_reason": ["length"] * n,
                            "status": ["ok"] * n,
                            "http_status": pa.array([200] * n, pa.int32()),
                            "saw_done": [True] * n,
                            "n_chunks": pa.array([tokens] * n, pa.int32()),
                        }
                    )
                    idx = np.repeat(np.arange(n, dtype=np.int32), tokens)
                    seq = np.tile(np.arange(tokens, dtype=np.int64), n)
                    t_ns = first[idx] + dt_ns[idx] * seq
                    chunks = chunk_table(
                        idx,
                        pa.array(rids),
                        seq,
                        t_ns,
                        np.full(n * tokens, -1, np.int64),
                        np.full(n * tokens, 4, np.int64),
                    )
                    yield wid, {"waves": waves, "requests": requests, "chunks": chunks}


def stage_night(db: Path, run_id: str, deployments: int, tokens: int) -> tuple[int, float]:
    rng = np.random.default_rng(abs(hash(run_id)) % 2**32)
    gen = list(night_waves(run_id, deployments, tokens, rng))  # generation is not timed
    rows = sum(t["chunks"].num_rows for _, t in gen)
    with open_warehouse(db) as con:
        deps = [
            Deployment(name=f"dep{d}", endpoint="http://bench/v1", model=f"model{d}")
            for d in range(deployments)
        ]
        record_run_start(con, run_id, {"bench": True}, time.time_ns(), deps)
        t0 = time.perf_counter()
        for wid, tables in gen:
            stage_tables(con, [wid], tables)
        con.execute("update raw.runs set status = 'complete' where run_id = ?", [run_id])
        con.execute("checkpoint")
        elapsed = time.perf_counter() - t0
    return rows, elapsed


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--deployments", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=1000)
    ap.add_argument(
        "--history",
        type=int,
        default=20,
        help="earlier nights in the warehouse (same streams, 20-token outputs: the "
        "marts cost depends on streams, not chunks)",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("SPARKCAP_HOME", str(Path(tmp) / "home"))
        db = Path(tmp) / "bench.duckdb"
        rows, s = stage_night(db, "20261001T020000Z-night", args.deployments, args.tokens)
        rate1 = rows / s
        print(
            f"full night: staged {rows:,} chunk rows in {s:.1f} s = {rate1:,.0f} rows/s "
            f"(target >= 1,000,000)"
        )
        t0 = time.perf_counter()
        build(db, full_refresh=True)
        full1 = time.perf_counter() - t0
        print(f"dbt build of that night: {full1:.1f} s (target < 60 s)")
        for n in range(args.history):
            stage_night(db, f"202610{n + 2:02d}T020000Z-hist", args.deployments, 20)
        t0 = time.perf_counter()
        build(db, full_refresh=True)
        print(f"full dbt build of {args.history + 1} nights: {time.perf_counter() - t0:.1f} s")
        rows, s = stage_night(db, "20261129T020000Z-new", args.deployments, args.tokens)
        rate2 = rows / s
        print(f"new full night: staged {rows:,} chunk rows in {s:.1f} s = {rate2:,.0f} rows/s")
        t0 = time.perf_counter()
        build(db)
        inc = time.perf_counter() - t0
        t0 = time.perf_counter()
        build(db, full_refresh=True)
        full_all = time.perf_counter() - t0
        n = args.history + 2
        print(
            f"incremental dbt build of the new night: {inc:.1f} s; full rebuild of all {n} "
            f"nights: {full_all:.1f} s; incremental / full = {inc / full_all:.2f}"
        )
        print(f"warehouse size: {db.stat().st_size / 1e6:,.0f} MB")
        ok = min(rate1, rate2) >= 1e6 and full1 < 60 and full_all < 60 and inc < 0.5 * full_all
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
