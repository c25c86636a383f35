"""A distributed night's landing zone at fleet scale: 100 deployments' waves (generated, not
swept) written to a Parquet lake as children write them, then verified and staged by the one
writer, then built by dbt. Prints what the scale-out guide's arithmetic uses: lake bytes per
chunk row, lake write rows/s per client process, staging rows/s, dbt build time.

    .venv/bin/python benchmarks/lake_build.py [--deployments 100] [--tokens 256] [--trials 3]

The default night: 100 deployments x 2 workloads x levels 1..16 x 3 trials x 256-token
streams = 81,600 streams, 20.9 M chunk rows.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from warehouse_build import night_waves

from sparkcap.config.deployment import Deployment
from sparkcap.store.lake import ChildKey, Lake, stage_lake
from sparkcap.store.runs import run_end_to, run_start_to
from sparkcap.transform.dbt_build import build


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--deployments", type=int, default=100)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--max-level", type=int, default=16)
    args = ap.parse_args()
    run_id = "20261130T020000Z-lake"
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("SPARKCAP_HOME", str(Path(tmp) / "home"))
        lake = Lake(Path(tmp) / "lake")
        db = Path(tmp) / "bench.duckdb"
        rng = np.random.default_rng(7)
        gen_s = write_s = 0.0
        rows = waves = 0
        t_gen = time.perf_counter()
        for wid, tables in night_waves(
            run_id, args.deployments, args.tokens, rng, range(1, args.max_level + 1), args.trials
        ):
            _, dep, workload, *_ = wid.split("/")
            t0 = time.perf_counter()
            lake.write_tables(ChildKey("2026-11-30", run_id, dep, workload), wid, tables)
            write_s += time.perf_counter() - t0
            rows += tables["chunks"].num_rows
            waves += 1
        gen_s = time.perf_counter() - t_gen - write_s
        size = sum(p.stat().st_size for p in (Path(tmp) / "lake").rglob("*") if p.is_file())
        chunk_bytes = sum(
            p.stat().st_size for p in (Path(tmp) / "lake" / "raw" / "chunks").rglob("*.parquet")
        )
        print(
            f"lake: {args.deployments} deployments, {waves:,} waves, {rows:,} chunk rows, "
            f"{size / 1e6:,.0f} MB ({size / rows:.2f} bytes per chunk row in all, chunks parts "
            f"{chunk_bytes / rows:.2f}); generated in {gen_s:.0f} s"
        )
        print(
            f"children's writes (one process): {write_s:.1f} s = {rows / write_s:,.0f} rows/s, "
            f"{write_s / waves * 1e3:.1f} ms per wave"
        )
        deps = [
            Deployment(name=f"dep{d}", endpoint="http://bench/v1", model=f"model{d}")
            for d in range(args.deployments)
        ]
        run_start_to(db, run_id, {"bench": True}, time.time_ns(), deps)
        t0 = time.perf_counter()
        staged = stage_lake(db, lake, run_id)
        stage_s = time.perf_counter() - t0
        assert staged.staged == waves and not staged.rejected, staged
        run_end_to(db, run_id, "complete")
        print(
            f"verify + stage (the one writer): {stage_s:.1f} s = {rows / stage_s:,.0f} "
            f"chunk rows/s, {waves / stage_s:,.0f} waves/s"
        )
        t0 = time.perf_counter()
        again = stage_lake(db, lake, run_id)
        print(
            f"staging again: {again.staged} staged, {again.already:,} already there, "
            f"{time.perf_counter() - t0:.1f} s (listing and reading manifests)"
        )
        t0 = time.perf_counter()
        result = build(db, full_refresh=True)
        build_s = time.perf_counter() - t0
        print(f"dbt build of the night: {build_s:.1f} s ({result.n_nodes} nodes)")
        print(f"warehouse size: {db.stat().st_size / 1e6:,.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
