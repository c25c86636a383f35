"""What a night is before it runs: the fleet as a profile shapes it, and the ``Night`` every
step is handed (local, Prefect and distributed nights walk the same object)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkcap.config.fleet import Fleet, load_fleet
from sparkcap.config.plan import SearchPlan, SweepPlan
from sparkcap.night.sweeps import DEMO_PROFILE, ProgressFn, RunResult
from sparkcap.publish import marts
from sparkcap.publish.text.capacity import capacity_words
from sparkcap.publish.text.night import step_gap_words
from sparkcap.servers.llama import launched
from sparkcap.store.connection import warehouse_key

PROFILES: dict[str, dict[str, Any]] = {
    "full": {},
    "demo": dict(DEMO_PROFILE),
    # the smallest meaningful night: used by the scheduled-run test
    "smoke": {"levels": (1, 2), "trials": 1, "max_tokens": 8, "warmup": False},
}
# an agent session's turns answer ``answer_tokens``, not the plan's max_tokens: a profile's
# shorter outputs cap them too, and the smoke night's sessions are two short turns
SESSION_CAPS: dict[str, dict[str, Any]] = {
    "full": {},
    "demo": {"answer_tokens": DEMO_PROFILE["max_tokens"]},
    "smoke": {"turns": 2, "answer_tokens": PROFILES["smoke"]["max_tokens"], "think_s": 0.2},
}


def _capped_sessions(workload: str, plan: SweepPlan, caps: dict[str, Any]) -> SweepPlan:
    if workload != "agent":
        return plan  # code and prose plans carry the default shape unread: left as they were
    shape = plan.sessions
    smaller = {k: min(getattr(shape, k), v) for k, v in caps.items()}
    return plan.model_copy(update={"sessions": shape.model_copy(update=smaller)})


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
    if SESSION_CAPS[profile]:
        caps = SESSION_CAPS[profile]
        fleet = fleet.map_plans(lambda w, p: _capped_sessions(w, p, caps))
    if profile == "smoke":  # the smallest night: no probes
        fleet = fleet.model_copy(
            update={
                "deployments": tuple(d.model_copy(update={"probes": {}}) for d in fleet.deployments)
            }
        )
    return fleet


def night_gaps(db_path: Path, run_id: str) -> list[str]:
    """What the night could not measure, as the marts say it: ``deployment step: reason``, and
    ``deployment/workload: verdict`` for a sweep that measured nothing (a night holding any
    ends failed, naming them)."""
    gaps = [step_gap_words(s) for s in marts.failed_steps(db_path, run_id)]
    return gaps + [capacity_words(c) for c in marts.unmeasured_pairs(db_path, run_id)]


@dataclass
class DQOutcome:
    success: bool
    failed: list[str]
    summary_page: Path | None
    data_docs_index: Path | None


def warehouse_limit_name(db_path: Path) -> str:
    """The Prefect global concurrency limit that keeps two nights off one warehouse."""
    return f"sparkcap-warehouse-{warehouse_key(db_path)}"


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
    # a distributed night (sparkcap.night.distributed) hands its children the fleet file, profile
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
