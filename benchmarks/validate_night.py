"""Data-quality validation of a full night (10.9 M chunk rows) — target: under a minute.

Chunk-level checks are aggregated per request in DuckDB; only per-request, per-wave and
per-level frames go through pandas and Great Expectations.

    .venv/bin/python benchmarks/validate_night.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from warehouse_build import stage_night

from sparkcap.dq.validate import run_validation


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("SPARKCAP_HOME", str(Path(tmp) / "home"))
        db = Path(tmp) / "bench.duckdb"
        run_id = "20261129T020000Z-night"
        rows, _ = stage_night(db, run_id, 8, 1000)
        t0 = time.perf_counter()
        result = run_validation(db, run_id, docs_dir=Path(tmp) / "dq")
        elapsed = time.perf_counter() - t0
        print(
            f"validated {rows:,} chunk rows, {len(result.outcomes)} expectations "
            f"in {elapsed:.1f} s (target < 60 s); blocking failures: "
            f"{len(result.blocking_failures)}"
        )
        ok = elapsed < 60 and result.success
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
