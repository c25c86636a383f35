"""The nightly fleet sweep as a Prefect flow. Thin: the night is ``sparkcap.night.steps.Night``
walked through ``pipeline.STEPS``, each step one Prefect task with the step's retries; the
same list ``sparkcap run --no-prefect`` walks.

Data-quality failures fail the validate task and the flow's final state, but the marts are
still built (failed trials are excluded) and the report is still published, saying why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact
from prefect.cache_policies import NONE
from prefect.concurrency.sync import concurrency
from prefect.states import Failed

from sparkcap.night import plan as night_plan
from sparkcap.night import steps as pipeline
from sparkcap.night.progress import emit, wave_summary
from sparkcap.night.schedule import ensure_warehouse_limit
from sparkcap.publish.night import read_night
from sparkcap.publish.text.markdown import changes_markdown
from sparkcap.settings import get_settings


def _log_progress(wave: Any, done: int, total: int) -> None:
    """Progress lines into the sweep task's run log, and to a CLI watching in-process."""
    if wave.trial > 0 or done == total:
        get_run_logger().info(
            "[%d/%d] %s/%s %s", done, total, wave.deployment, wave.workload, wave_summary(wave)
        )
    emit(wave, done, total)


def _as_task(step: pipeline.Step) -> Any:
    def run(night: night_plan.Night) -> str:
        result = pipeline.run_step(step, night)
        get_run_logger().info("%s: %s", result.step, result.summary)
        return result.summary

    # the night object is the steps' shared state: never hashed, cached or persisted
    return task(
        name=step.name,
        retries=step.retries,
        retry_delay_seconds=step.retry_delay_s,
        cache_policy=NONE,
        persist_result=False,
    )(run)


@flow(name="nightly-fleet-sweep", log_prints=True)
def nightly_fleet_sweep(
    fleet: str = "fleets/twin.yaml",
    db: str | None = None,
    profile: str = "full",
    reports: str | None = None,
    run_id: str | None = None,
    search: dict[str, Any] | None = None,
    distributed: bool | None = None,
    finish: bool = False,
) -> Any:
    """``search``: a SearchPlan's fields; every workload is then searched, not swept as a grid.
    ``distributed``: sweep on the fleet's work pool, one child run per deployment × workload
    (default: the fleet file's ``distributed.enabled``). ``finish``: the distributed night
    ``run_id``'s parent stopped; stage its lake, name what is missing, build and report."""
    settings = get_settings()
    db_path = Path(db or settings.db_path).resolve()
    the_fleet = night_plan.fleet_for(fleet, profile, search=search)
    night = night_plan.Night(
        fleet=the_fleet,
        db_path=db_path,
        reports_dir=Path(reports or settings.reports_dir).resolve(),
        run_id=run_id,
        progress=_log_progress,
        distributed=the_fleet.distributed.enabled if distributed is None else distributed,
        fleet_path=Path(fleet).resolve(),
        profile=profile,
        search=search,
        finish=finish,
    )
    with concurrency(ensure_warehouse_limit(str(db_path)), occupy=1, strict=True):
        return _night(night)


def _night(night: night_plan.Night) -> Any:
    with night.servers():
        for step in pipeline.STEPS:
            if not step.night_goes_on:
                _as_task(step)(night)  # a failure here fails the night, with its reason
                continue
            state = _as_task(step)(night, return_state=True)
            if state.is_failed() and step.name == "validate" and night.dq is not None:
                create_markdown_artifact(
                    key="data-quality",
                    markdown="# Data quality failed\n\n"
                    + "\n".join(f"- {x}" for x in night.dq.failed),
                    description=f"blocking expectations failed for {night.run_id}",
                )
    result = night.result()
    run_id, index = result["run_id"], result["report"]
    built = read_night(night.db_path, run_id)
    create_markdown_artifact(
        key="capacity",
        markdown=pipeline.capacity_markdown(built),
        description=f"capacity for run {run_id}",
    )
    changes = built.changes
    create_markdown_artifact(
        key="changes",
        markdown=changes_markdown(run_id, changes),
        description=f"{sum(ch.is_change for ch in changes)} change(s) vs baseline for run {run_id}",
    )
    create_link_artifact(key="report", link=Path(index).as_uri(), link_text=f"report {run_id}")
    # every reason the night failed is named, a data-quality failure beside any gap
    dq_failed = night.dq is not None and not night.dq.success
    dq = "; data quality failed" if dq_failed else ""
    if result["gaps"]:
        return Failed(
            message=f"run {run_id} is incomplete: "
            + "; ".join(result["gaps"])[:1500]
            + f"{dq}; everything else is staged and reported at {index}"
        )
    if result["run_status"] != "complete":
        return Failed(
            message=f"run {run_id} is incomplete: {result['run_reason']}{dq}; finished waves "
            f"are staged and reported at {index}"
        )
    if dq_failed:
        return Failed(message=f"data quality failed for {run_id}; report published at {index}")
    return result
