"""The nightly fleet sweep as a Prefect flow. Thin: every step is a sparkcap library call.

Load generation is never retried (a retried wave is a different measurement); staging, dbt
and the report are retried. Data-quality failures fail the validate task and the flow's final
state, but the marts are still built (failed trials are excluded) and the report is still
published, saying why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact
from prefect.concurrency.sync import concurrency
from prefect.states import Failed

from sparkcap import pipeline
from sparkcap.deploy import ensure_warehouse_limit
from sparkcap.progress import emit, wave_summary
from sparkcap.settings import get_settings


class DataQualityFailed(RuntimeError):
    """A blocking expectation failed for this run."""


@task(name="sweep", retries=0)
def sweep_task(fleet_path: str, db: str, profile: str, run_id: str | None) -> dict[str, Any]:
    fleet = pipeline.fleet_for(fleet_path, profile)
    logger = get_run_logger()

    def progress(wave: Any, done: int, total: int) -> None:
        if wave.trial > 0 or done == total:
            logger.info(
                "[%d/%d] %s/%s %s", done, total, wave.deployment, wave.workload, wave_summary(wave)
            )
        emit(wave, done, total)  # a CLI that started this flow in-process shows it live

    result = pipeline.sweep(fleet, Path(db), progress, run_id)
    if result.status != "complete":
        logger.error("run %s is %s: %s", result.run_id, result.status, result.reason)
    return {"run_id": result.run_id, "status": result.status, "reason": result.reason}


@task(name="probes", retries=0)
def probes_task(fleet_path: str, db: str, profile: str, run_id: str) -> list[str]:
    """The probes the fleet file asks for (never retried); returns the ones that failed,
    which are recorded in the warehouse and cost nothing else."""
    failed = pipeline.probes(pipeline.fleet_for(fleet_path, profile), Path(db), run_id)
    if failed:
        get_run_logger().error("probes failed: %s", ", ".join(failed))
    return failed


@task(name="link-check", retries=0)
def link_task(fleet_path: str, db: str, profile: str, run_id: str) -> int:
    return pipeline.link_check(pipeline.fleet_for(fleet_path, profile), Path(db), run_id)


@task(name="stage", retries=3, retry_delay_seconds=5)
def stage_task(db: str) -> int:
    return pipeline.stage_pending(Path(db))


@task(name="validate", retries=0)
def validate_task(db: str, run_id: str, reports: str) -> dict[str, Any]:
    outcome = pipeline.validate(Path(db), run_id, Path(reports))
    if not outcome.success:
        create_markdown_artifact(
            key="data-quality",
            markdown="# Data quality failed\n\n" + "\n".join(f"- {x}" for x in outcome.failed),
            description=f"blocking expectations failed for {run_id}",
        )
        raise DataQualityFailed(f"blocking expectations failed: {', '.join(outcome.failed)}")
    return {"success": True}


@task(name="dbt-build", retries=2, retry_delay_seconds=5)
def build_task(db: str, threshold: float) -> int:
    return pipeline.build(Path(db), threshold)


@task(name="report", retries=2, retry_delay_seconds=5)
def report_task(db: str, run_id: str, reports: str) -> str:
    return str(pipeline.report(Path(db), run_id, Path(reports)))


@flow(name="nightly-fleet-sweep", log_prints=True)
def nightly_fleet_sweep(
    fleet: str = "fleets/twin.yaml",
    db: str | None = None,
    profile: str = "full",
    reports: str | None = None,
    run_id: str | None = None,
) -> Any:
    settings = get_settings()
    db_path = str(Path(db or settings.db_path).resolve())
    reports_dir = str(Path(reports or settings.reports_dir).resolve())
    with concurrency(ensure_warehouse_limit(db_path), occupy=1, strict=True):
        return _night(fleet, db_path, profile, reports_dir, run_id)


def _night(fleet: str, db_path: str, profile: str, reports_dir: str, run_id: str | None) -> Any:
    threshold = pipeline.fleet_for(fleet, profile).threshold_tok_s
    swept = sweep_task(fleet, db_path, profile, run_id)
    run_id = swept["run_id"]
    probes_task(fleet, db_path, profile, run_id)
    link_task(fleet, db_path, profile, run_id)
    stage_task(db_path)
    dq_state = validate_task(db_path, run_id, reports_dir, return_state=True)
    build_task(db_path, threshold)
    index = report_task(db_path, run_id, reports_dir)
    create_markdown_artifact(
        key="capacity",
        markdown=pipeline.capacity_markdown(Path(db_path), run_id),
        description=f"capacity for run {run_id}",
    )
    create_link_artifact(key="report", link=Path(index).as_uri(), link_text=f"report {run_id}")
    result = {"run_id": run_id, "report": index, "db": db_path}
    gaps = pipeline.night_gaps(Path(db_path), run_id)
    if gaps:
        return Failed(
            message=f"run {run_id} is incomplete: "
            + "; ".join(gaps)[:1500]
            + f"; everything else is staged and reported at {index}"
        )
    if swept["status"] != "complete":
        return Failed(
            message=f"run {run_id} is incomplete: {swept['reason']}; finished waves "
            f"are staged and reported at {index}"
        )
    if dq_state.is_failed():
        return Failed(message=f"data quality failed for {run_id}; report published at {index}")
    return result
