"""The nightly pipeline's steps, as plain functions: sweep, stage, validate, build, report.

A night is one ``Night`` object walked through ``STEPS``: by the Prefect flow
(``flows/nightly.py``, one task per step) and by ``sparkcap run --no-prefect`` (``run_night``),
one step after another, so that exactly one process writes the DuckDB file at a time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkcap.config.fleet import Fleet
from sparkcap.dq.validate import run_validation
from sparkcap.errors import DataQualityFailed
from sparkcap.night import progress
from sparkcap.night.distributed import (
    check_budgets,
    children_to_finish,
    finish_distributed,
    require_server,
    sweep_distributed,
)
from sparkcap.night.plan import DQOutcome, Night
from sparkcap.night.schedule import load_nightly_flow
from sparkcap.night.sweeps import (
    ProgressFn,
    RunResult,
    run_fleet,
    run_fleet_probes,
    run_interruptibly,
    run_link_check,
)
from sparkcap.publish.night import NightReport
from sparkcap.publish.report import render_report
from sparkcap.publish.text import markdown
from sparkcap.store.runs import record_step_to
from sparkcap.store.spool import stage_spool
from sparkcap.transform.dbt_build import build as dbt_build


def sweep(
    fleet: Fleet,
    db_path: Path,
    progress: ProgressFn | None = None,
    run_id: str | None = None,
    endpoints: dict[str, str] | None = None,
) -> RunResult:
    """Sweep the fleet; a deployment whose server died leaves the run ``incomplete``, and so
    does a Ctrl-C, saying so."""
    return run_interruptibly(
        run_fleet(fleet, db_path, progress=progress, run_id=run_id, endpoints=endpoints)
    )


def probes(
    fleet: Fleet, db_path: Path, run_id: str, endpoints: dict[str, str] | None = None
) -> list[str]:

    return run_interruptibly(run_fleet_probes(fleet, db_path, run_id, endpoints))


def link_check(fleet: Fleet, db_path: Path, run_id: str) -> int:

    return len(run_link_check(fleet, db_path, run_id)[1])


def stage_pending(db_path: Path) -> int:

    return stage_spool(db_path)


def validate(
    db_path: Path,
    run_id: str,
    reports_dir: Path,
    threshold: float | None = None,
) -> DQOutcome:

    # the night's build vars: validation's dbt run builds int_stream_rates with them, so the
    # night's build after it finds them built with the same threshold and rebuilds nothing
    dbt_vars = {"threshold_tok_s": threshold} if threshold is not None else None
    result = run_validation(
        db_path, run_id, docs_dir=reports_dir / run_id / "dq", dbt_vars=dbt_vars
    )
    return DQOutcome(
        success=result.success,
        failed=sorted({o.expectation for o in result.blocking_failures}),
        summary_page=result.summary_page,
        data_docs_index=result.data_docs_index,
    )


def build(db_path: Path, threshold: float | None = None) -> int:

    dbt_vars = {"threshold_tok_s": threshold} if threshold is not None else None
    return dbt_build(db_path, dbt_vars=dbt_vars).n_nodes


def report(db_path: Path, run_id: str, reports_dir: Path) -> Path:

    return render_report(db_path, run_id, reports_dir).index


def capacity_markdown(night: NightReport) -> str:
    """The capacity table published as a Prefect artifact."""
    return markdown.capacity_markdown(night.run_id, night.fleet, night.capacities)


@dataclass(frozen=True)
class StepResult:
    step: str
    summary: str


def _sweep_step(night: Night) -> StepResult:
    if night.distributed or night.finish:
        result = finish_distributed(night) if night.finish else sweep_distributed(night)
        night.sweep, night.run_id = result, result.run_id
        return StepResult("sweep", f"{result.n_staged} waves from the lake, run {result.status}")
    result = sweep(night.fleet, night.db_path, night.progress, night.run_id, night.endpoints)
    night.sweep, night.run_id = result, result.run_id
    return StepResult("sweep", f"{len(result.waves)} waves, run {result.status}")


def _not_run_when_finishing(night: Night, step: str, what: str) -> StepResult:

    why = (
        f"not run: the night was finished from its lake after its parent stopped ({what} "
        "would measure the fleet now, not that night)"
    )
    record_step_to(night.db_path, night.require_run_id(), None, step, "failed", why)
    return StepResult(step, why)


def _probes_step(night: Night) -> StepResult:
    if night.finish:
        if any(d.probes for d in night.fleet.deployments):
            return _not_run_when_finishing(night, "probes", "the probes")
        return StepResult("probes", "none configured")
    run_id = night.require_run_id()
    night.failed_probes = probes(night.fleet, night.db_path, run_id, night.endpoints)
    failed = night.failed_probes
    return StepResult("probes", ("failed: " + ", ".join(failed)) if failed else "ok")


def _links_step(night: Night) -> StepResult:
    if night.finish:
        if any(d.links for d in night.fleet.deployments):
            return _not_run_when_finishing(night, "link-check", "a link check")
        return StepResult("link-check", "none configured")
    n = link_check(night.fleet, night.db_path, night.require_run_id())
    return StepResult("link-check", f"{n} link(s) measured")


def _stage_step(night: Night) -> StepResult:
    return StepResult("stage", f"{stage_pending(night.db_path)} spooled wave(s) staged")


def _validate_step(night: Night) -> StepResult:
    night.dq = validate(
        night.db_path, night.require_run_id(), night.reports_dir, night.fleet.threshold_tok_s
    )
    if not night.dq.success:
        raise DataQualityFailed(f"blocking expectations failed: {', '.join(night.dq.failed)}")
    return StepResult("validate", "every blocking expectation met")


def _build_step(night: Night) -> StepResult:
    n = build(night.db_path, night.fleet.threshold_tok_s)
    return StepResult("dbt-build", f"{n} dbt nodes")


def _report_step(night: Night) -> StepResult:
    night.report_index = report(night.db_path, night.require_run_id(), night.reports_dir)
    return StepResult("report", str(night.report_index))


@dataclass(frozen=True)
class Step:
    """One step of a night. Load generation is never retried (a retried wave is another
    measurement); staging, dbt and the report are. A step that may fail without stopping the
    night (``night_goes_on``) fails alone: data quality fails the validate step, the marts are
    still built (failed trials excluded) and the report says why."""

    name: str
    run: Callable[[Night], StepResult]
    retries: int = 0
    retry_delay_s: float = 0.0
    night_goes_on: bool = False


STEPS: tuple[Step, ...] = (
    Step("sweep", _sweep_step),
    Step("probes", _probes_step),
    Step("link-check", _links_step),
    Step("stage", _stage_step, retries=3, retry_delay_s=5),
    Step("validate", _validate_step, night_goes_on=True),
    Step("dbt-build", _build_step, retries=2, retry_delay_s=5),
    Step("report", _report_step, retries=2, retry_delay_s=5),
)


def run_step(step: Step, night: Night) -> StepResult:
    """One attempt at ``step``, announced as it starts and as it ends, with its time: a night
    shows every step (probes, staging, data quality, dbt, the report), not only its waves."""
    progress.note(f"step {step.name} …")
    started = time.monotonic()
    try:
        result = step.run(night)
    except Exception as exc:
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        progress.note(f"step {step.name} failed after {time.monotonic() - started:.1f} s: {why}")
        raise
    progress.note(f"step {step.name} done in {time.monotonic() - started:.1f} s: {result.summary}")
    return result


def run_night(night: Night) -> dict[str, Any]:
    """The whole night without Prefect: ``STEPS`` in order, with their retries.

    A deployment that cannot be measured, or a probe or link check that fails, costs that part
    of the night only: every other step still runs, the report is published, and the result's
    ``gaps`` (from ``marts.fct_step_outcomes``) says what is missing and why.
    """
    with night.servers():
        for step in STEPS:
            for attempt in range(step.retries + 1):
                try:
                    run_step(step, night)
                    break
                except DataQualityFailed:
                    break  # recorded on the night; the rest of it runs
                except Exception:
                    if attempt == step.retries:
                        raise
                    time.sleep(step.retry_delay_s)
    return night.result()


def run_pipeline(
    fleet: Fleet,
    db_path: Path,
    reports_dir: Path,
    progress: ProgressFn | None = None,
    run_id: str | None = None,
    finish: bool = False,
) -> dict[str, Any]:
    """``run_night`` for a fleet (the CLI's ``--no-prefect`` path and the tests)."""
    night = Night(fleet, db_path, reports_dir, run_id=run_id, progress=progress, finish=finish)
    return run_night(night)


@dataclass(frozen=True)
class WatchedNight:
    """How a night run from the command line ended: its result, or ``None`` with the flow's
    final state when the Prefect flow failed or crashed before it had one."""

    result: dict[str, Any] | None
    state: Any = None


def run_watched(
    fleet: Fleet,
    fleet_path: Path,
    db_path: Path,
    reports_dir: Path,
    first_line: str,
    *,
    run_id: str,
    prefect: bool,
    profile: str = "full",
    search: dict[str, Any] | None = None,
    distributed: bool = False,
    finish: bool = False,
) -> WatchedNight:
    """A night run in this process and shown as it runs: ``first_line`` at once, then each
    wave and each step's start and end; through the Prefect flow (the steps as its tasks; it
    reads the fleet file itself) or, without Prefect, ``run_pipeline``. A Ctrl-C ends in
    ``KeyboardInterrupt``, the run row saying so.

    What the night's steps would refuse is refused first, before anything is recorded: a
    distributed night without its Prefect server or over a host's stream budget, or finishing
    ``run_id`` when its children's records cannot finish it."""
    if distributed and not finish:
        check_budgets(fleet)
        require_server()
    if finish:
        children_to_finish(fleet, db_path, run_id)
    board = progress.NightProgress(fleet.planned_waves())
    with board:
        board.line(first_line)
        if not prefect:
            progress.add_sink(board)  # the steps' start and end lines
            try:
                return WatchedNight(
                    run_pipeline(fleet, db_path, reports_dir, board, run_id=run_id, finish=finish)
                )
            finally:
                progress.remove_sink(board)
        flow = load_nightly_flow()
        progress.add_sink(board)  # the flow's waves and steps, from its tasks in this process
        try:
            state = flow(
                fleet=str(fleet_path),
                db=str(db_path),
                profile=profile,
                reports=str(reports_dir),
                run_id=run_id,
                search=search,
                distributed=distributed,
                finish=finish,
                return_state=True,
            )
        finally:
            progress.remove_sink(board)
        result = state.result(raise_on_failure=False) if state.is_completed() else None
    return WatchedNight(result, state)
