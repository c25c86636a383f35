"""The nightly pipeline's steps, as plain functions: sweep, stage, validate, build, report.

A night is one ``Night`` object walked through ``STEPS``: by the Prefect flow
(``flows/nightly.py``, one task per step) and by ``sparkcap run --no-prefect`` (``run_night``),
one step after another, so that exactly one process writes the DuckDB file at a time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkcap import progress
from sparkcap.config import SearchPlan
from sparkcap.errors import SparkcapError
from sparkcap.fleet import Fleet, load_fleet
from sparkcap.runner import DEMO_PROFILE, ProgressFn, RunResult, run_fleet, run_interruptibly

PROFILES: dict[str, dict[str, Any]] = {
    "full": {},
    "demo": dict(DEMO_PROFILE),
    # the smallest meaningful night: used by the scheduled-run test
    "smoke": {"levels": (1, 2), "trials": 1, "max_tokens": 8, "warmup": False},
}


def fleet_for(
    fleet_path: str | Path,
    profile: str = "full",
    search: dict[str, Any] | SearchPlan | None = None,
    **overrides: Any,
) -> Fleet:
    """The fleet file with a profile's plan changes and, given ``search``, every workload
    searched with that plan (``sparkcap run --search``) instead of its own."""
    if search is not None:
        overrides["search"] = search if isinstance(search, SearchPlan) else SearchPlan(**search)
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
    from sparkcap.runner import run_fleet_probes

    return run_interruptibly(run_fleet_probes(fleet, db_path, run_id, endpoints))


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


def unmeasured_pairs(db_path: Path, run_id: str) -> list[tuple[str, str, str]]:
    """Deployment × workloads swept without one valid measurement (every request refused,
    every stream broken, every trial spoiled), with the mart's verdict: their capacity 0 is no
    measurement, so a sweep or night that holds one has not done its job."""
    from sparkcap.warehouse import open_warehouse

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
    from sparkcap.warehouse import open_warehouse

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
            "first_failing_level, is_lower_bound, n_valid_trials, capacity_verdict "
            "from marts.fct_capacity where run_id = ? order by deployment, workload",
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
        "lower bound | valid trials | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for d, w, c, ci, ff, lb, n, verdict in rows:
        lines.append(
            f"| {d} | {w} | {c} | {ci} | {ff if ff is not None else '—'} | "
            f"{'yes' if lb else 'no'} | {n} | {_markdown_cell(verdict)} |"
        )
    return "\n".join(lines)


def _markdown_cell(text: str) -> str:
    """A verdict quotes recorded reasons: as a table cell a ``|`` or a line break in them must
    not end the cell or the row."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


class DataQualityFailed(SparkcapError, RuntimeError):
    """A blocking expectation failed for this run (the night goes on; its result says so)."""


@dataclass
class Night:
    """One night: the fleet, its run id, where it lands, and the servers it launched, held
    from the first step to the last (a launched server is started once a night, so the probes
    meet the server the sweep measured, at the endpoint ``raw.deployments`` recorded).

    Both ways of running a night walk the same ``STEPS`` in the same order with this object:
    ``run_night`` (``sparkcap run --no-prefect``) and the Prefect flow (``flows/nightly.py``),
    which wraps each step in a task with the step's retries.
    """

    fleet: Fleet
    db_path: Path
    reports_dir: Path
    run_id: str | None = None
    progress: ProgressFn | None = None
    # a distributed night (sparkcap.distributed) hands its children the fleet file, profile
    # and search plan, from which each builds the same fleet as this one
    distributed: bool = False
    fleet_path: Path | None = None
    profile: str = "full"
    search: dict[str, Any] | None = None
    endpoints: dict[str, str] | None = None
    # finishing a distributed night whose parent stopped: the lake, not a new sweep; nothing is
    # launched and the probes and link checks are not run (they would measure now, not then)
    finish: bool = False
    sweep: RunResult | None = None
    failed_probes: list[str] = field(default_factory=list)
    dq: DQOutcome | None = None
    report_index: Path | None = None

    @contextlib.contextmanager
    def servers(self) -> Iterator[Night]:
        """Launch what the fleet asks sparkcap to launch, for the whole night."""
        from sparkcap.localserver import launched

        if self.finish:
            yield self
            return
        with launched(self.fleet) as endpoints:
            self.endpoints = endpoints
            try:
                yield self
            finally:
                self.endpoints = None

    def require_run_id(self) -> str:
        if self.run_id is None:
            raise RuntimeError("the night has no run id before its sweep")
        return self.run_id

    def result(self) -> dict[str, Any]:
        """What the CLI and the flow report: the numbers themselves are in the marts."""
        run_id = self.require_run_id()
        return {
            "run_id": run_id,
            "report": str(self.report_index) if self.report_index else None,
            "db": str(self.db_path),
            "dq_success": self.dq.success if self.dq else None,
            "dq_failed": self.dq.failed if self.dq else [],
            "run_status": self.sweep.status if self.sweep else "incomplete",
            "run_reason": self.sweep.reason if self.sweep else "no sweep",
            "gaps": night_gaps(self.db_path, run_id),
        }


@dataclass(frozen=True)
class StepResult:
    step: str
    summary: str


def _sweep_step(night: Night) -> StepResult:
    if night.distributed or night.finish:
        from sparkcap.distributed import finish_distributed, sweep_distributed

        result = finish_distributed(night) if night.finish else sweep_distributed(night)
        night.sweep, night.run_id = result, result.run_id
        return StepResult("sweep", f"{result.n_staged} waves from the lake, run {result.status}")
    result = sweep(night.fleet, night.db_path, night.progress, night.run_id, night.endpoints)
    night.sweep, night.run_id = result, result.run_id
    return StepResult("sweep", f"{len(result.waves)} waves, run {result.status}")


def _not_run_when_finishing(night: Night, step: str, what: str) -> StepResult:
    from sparkcap.warehouse import record_step_to

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
    night.dq = validate(night.db_path, night.require_run_id(), night.reports_dir)
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
