"""Typed readers of the marts: what the CLI, the report, ``compare`` and the Prefect artifact
print is read here, once, from the models dbt built (read-only)."""

from __future__ import annotations

from pathlib import Path

from sparkcap.store.warehouse import open_warehouse


def unmeasured_pairs(db_path: Path, run_id: str) -> list[tuple[str, str, str]]:
    """Deployment × workloads swept without one valid measurement (every request refused,
    every stream broken, every trial spoiled), with the mart's verdict: their capacity 0 is no
    measurement, so a sweep or night that holds one has not done its job."""
    with open_warehouse(db_path, read_only=True) as con:
        rows = con.execute(
            "select deployment, workload, capacity_verdict from marts.fct_capacity "
            "where run_id = ? and not is_measured order by deployment, workload",
            [run_id],
        ).fetchall()
    return [(str(d), str(w), str(v)) for d, w, v in rows]


def night_gaps(db_path: Path, run_id: str) -> list[str]:
    """What the night could not measure, as the marts say it: ``deployment step: reason``, and
    ``deployment/workload: verdict`` for a sweep that measured nothing."""
    with open_warehouse(db_path, read_only=True) as con:
        rows = con.execute(
            "select deployment, outcome, reason from marts.fct_step_outcomes "
            "where run_id = ? and is_failed order by deployment, step",
            [run_id],
        ).fetchall()
    gaps = [
        f"{d or 'night'} {outcome}: {reason or 'no reason recorded'}" for d, outcome, reason in rows
    ]
    gaps += [f"{d}/{w}: {v}" for d, w, v in unmeasured_pairs(db_path, run_id)]
    return gaps
