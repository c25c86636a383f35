"""raw.link_tests: what the night's link tests measured (loadgen/links.py runs them)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from sparkcap.loadgen.links import LinkResult
from sparkcap.store.schema import raw_table
from sparkcap.store.staging import replace_run_rows


def store_link_results(db_path: Path, run_id: str, results: list[LinkResult]) -> None:
    """raw.link_tests for one run: what each link measured, replacing an earlier try."""
    now = datetime.now(UTC)
    table = raw_table(
        "link_tests",
        {
            "run_id": [run_id] * len(results),
            "deployment": [r.deployment for r in results],
            "link": [r.spec.name for r in results],
            "node_a": [r.spec.a or None for r in results],
            "node_b": [r.spec.b or None for r in results],
            "nominal_gbps": [r.spec.nominal_gbps for r in results],
            "achieved_gbps": [r.achieved_gbps for r in results],
            # share and healthy stay NULL: dbt judges link health (int_link_health)
            "min_share": [r.min_share for r in results],
            "tool": [r.spec.format for r in results],
            "error": [r.error for r in results],
            "measured_at": [now] * len(results),
        },
    )
    replace_run_rows(db_path, "raw.link_tests", run_id, table)
