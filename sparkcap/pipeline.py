"""The nightly pipeline's steps, as plain functions: sweep, stage, validate, build, report.

The Prefect flow (``flows/nightly.py``) and ``sparkcap run --no-prefect`` both call these, one
after another, so that exactly one process writes the DuckDB file at a time.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sparkcap.fleet import Fleet, load_fleet
from sparkcap.runner import DEMO_PROFILE, ProgressFn, RunResult, run_fleet

Profile = Literal["full", "demo", "smoke"]
PROFILES: dict[str, dict[str, Any]] = {
    "full": {},
    "demo": dict(DEMO_PROFILE),
    # the smallest meaningful night: used by the scheduled-run test
    "smoke": {"levels": (1, 2), "trials": 1, "max_tokens": 8, "warmup": False},
}


def fleet_for(fleet_path: str | Path, profile: str = "full", **overrides: Any) -> Fleet:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r} (choose from {', '.join(PROFILES)})")
    fleet = load_fleet(fleet_path)
    changes = {**PROFILES[profile], **{k: v for k, v in overrides.items() if v is not None}}
    fleet = fleet.with_profile(**changes) if changes else fleet
    if profile == "smoke":  # the smallest night: no probes
        fleet = fleet.model_copy(
            update={
                "deployments": tuple(d.model_copy(update={"probes": {}}) for d in fleet.deployments)
            }
        )
    return fleet


def sweep(
    fleet: Fleet,
    db_path: Path,
    progress: ProgressFn | None = None,
    run_id: str | None = None,
) -> RunResult:
    """Sweep the fleet; a deployment whose server died leaves the run ``incomplete``."""
    return asyncio.run(run_fleet(fleet, db_path, progress=progress, run_id=run_id))


def probes(fleet: Fleet, db_path: Path, run_id: str) -> list[str]:
    from sparkcap.runner import run_fleet_probes

    return asyncio.run(run_fleet_probes(fleet, db_path, run_id))


def link_check(fleet: Fleet, db_path: Path, run_id: str) -> int:
    from sparkcap.runner import run_link_check

    return len(run_link_check(fleet, db_path, run_id)[1])


def stage_pending(db_path: Path) -> int:
    from sparkcap.spool import stage_spool

    return stage_spool(db_path)


@dataclass
class DQOutcome:
    success: bool
    failed: list[str]
    summary_page: Path | None
    data_docs_index: Path | None


def validate(
    db_path: Path,
    run_id: str,
    reports_dir: Path,
    threshold: float | None = None,
) -> DQOutcome:
    from sparkcap.dq.validate import run_validation

    result = run_validation(db_path, run_id, docs_dir=reports_dir / run_id / "dq")
    return DQOutcome(
        success=result.success,
        failed=sorted({o.expectation for o in result.blocking_failures}),
        summary_page=result.summary_page,
        data_docs_index=result.data_docs_index,
    )


def build(db_path: Path, threshold: float | None = None) -> int:
    from sparkcap.build import build as dbt_build

    dbt_vars = {"threshold_tok_s": threshold} if threshold is not None else None
    return dbt_build(db_path, dbt_vars=dbt_vars).n_nodes


def report(db_path: Path, run_id: str, reports_dir: Path) -> Path:
    from sparkcap.report import render_report

    return render_report(db_path, run_id, reports_dir).index


def warehouse_limit_name(db_path: Path) -> str:
    """The Prefect global concurrency limit that keeps two nights off one warehouse."""
    from sparkcap.spool import warehouse_key

    return f"sparkcap-warehouse-{warehouse_key(db_path)}"


def night_gaps(db_path: Path, run_id: str) -> list[str]:
    """What the night could not measure, as the marts say it: ``deployment step: reason``."""
    from sparkcap.warehouse import open_warehouse

    with open_warehouse(db_path, read_only=True) as con:
        rows = con.execute(
            "select deployment, outcome, reason from marts.fct_step_outcomes "
            "where run_id = ? and is_failed order by deployment, step",
            [run_id],
        ).fetchall()
    return [
        f"{d or 'night'} {outcome}: {reason or 'no reason recorded'}" for d, outcome, reason in rows
    ]


def capacity_markdown(db_path: Path, run_id: str) -> str:
    """The capacity table published as a Prefect artifact."""
    from sparkcap.warehouse import open_warehouse

    with open_warehouse(db_path, read_only=True) as con:
        fleet = con.execute(
            "select workload, capacity_streams, is_extrapolated, threshold_tok_s "
            "from marts.fct_fleet_capacity where run_id = ? order by workload",
            [run_id],
        ).fetchall()
        rows = con.execute(
            "select deployment, workload, capacity_streams, capacity_interpolated, "
            "first_failing_level, is_lower_bound, n_valid_trials from marts.fct_capacity "
            "where run_id = ? order by deployment, workload",
            [run_id],
        ).fetchall()
    lines = [f"# sparkcap run {run_id}", ""]
    for wl, cap, extrap, t in fleet:
        lines.append(
            f"- **{wl}**: {cap} streams at {t:g} tok/s"
            + (" (includes extrapolated replicas)" if extrap else "")
        )
    lines += [
        "",
        "| deployment | workload | capacity | interpolated | first failing | "
        "lower bound | valid trials |",
        "|---|---|---|---|---|---|---|",
    ]
    for d, w, c, ci, ff, lb, n in rows:
        lines.append(
            f"| {d} | {w} | {c} | {ci} | {ff if ff is not None else '—'} | "
            f"{'yes' if lb else 'no'} | {n} |"
        )
    return "\n".join(lines)


def run_pipeline(
    fleet: Fleet,
    db_path: Path,
    reports_dir: Path,
    progress: ProgressFn | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """The whole night without Prefect: the same steps, in the same order.

    A deployment that cannot be measured, or a probe or link check that fails, costs that part
    of the night only: every other step still runs, the report is published, and the result's
    ``gaps`` (from ``marts.fct_step_outcomes``) says what is missing and why.
    """
    result = sweep(fleet, db_path, progress, run_id)
    probes(fleet, db_path, result.run_id)
    link_check(fleet, db_path, result.run_id)
    stage_pending(db_path)
    dq = validate(db_path, result.run_id, reports_dir)
    build(db_path, fleet.threshold_tok_s)
    index = report(db_path, result.run_id, reports_dir)
    return {
        "run_id": result.run_id,
        "report": str(index),
        "dq_success": dq.success,
        "dq_failed": dq.failed,
        "run_status": result.status,
        "run_reason": result.reason,
        "gaps": night_gaps(db_path, result.run_id),
    }
