"""What a child of a distributed night does on whichever worker takes it: sweep one deployment
× workload into the lake (never the warehouse), beating a heartbeat there while it lives, and
holding the Prefect concurrency limits that keep it off targets and shared links others use.

Also what parent and child agree on: the child's parameters (``ChildSpec``), the flow it runs
as, and the limits it holds (the parent checks them before the night starts).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sparkcap.config.base import WorkloadName
from sparkcap.config.fleet import Distributed, FleetDeployment
from sparkcap.config.plan import SweepPlan
from sparkcap.errors import DistributedError, PreflightError
from sparkcap.loadgen.metrics import scrape_into
from sparkcap.loadgen.power import with_power
from sparkcap.loadgen.records import WaveRecord
from sparkcap.loadgen.sweep import EndpointDown, run_sweep
from sparkcap.night.calibrate import plan_within_budget, read_budget
from sparkcap.night.plan import fleet_for
from sparkcap.night.schedule import ensure_limit
from sparkcap.night.sweeps import ProgressFn, preflight
from sparkcap.settings import get_settings
from sparkcap.store.lake import ATTEMPTS, ChildKey, Lake
from sparkcap.transform.live_judge import ClientSpoiledRule, SearchJudge

log = logging.getLogger(__name__)

CHILD_FLOW = "sparkcap-sweep-target"
CHILD_ENTRYPOINT = "flows/distributed.py:sweep_target"


class ChildSpec(BaseModel):
    """The parameters of one child flow run. The fleet travels as its file's path (readable
    at the same path on every worker host, like the lake), never as a dump: a dump would carry
    header secrets into Prefect's database."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fleet_path: str
    profile: str = "full"
    search: dict[str, Any] | None = None
    deployment: str
    workload: WorkloadName
    run_id: str
    night: str
    lake: str
    endpoint: str | None = None  # a server the parent launched for the night
    # the parent gives a child back to the pool once: its second attempt beats apart
    attempt: int = Field(1, ge=ATTEMPTS[0], le=ATTEMPTS[-1])

    @property
    def key(self) -> ChildKey:
        return ChildKey(self.night, self.run_id, self.deployment, self.workload)


def peak_streams(plan: SweepPlan) -> int:
    """The most streams a sweep of this plan holds open at once."""
    return plan.search.max_level if plan.search is not None else max(plan.levels)


def child_limits(
    deployment: FleetDeployment, plan: SweepPlan, settings: Distributed, host: str
) -> list[tuple[list[str], int, int]]:
    """What a child holds while it sweeps: (limit names, slots occupied, limit size)."""
    exclusive = [f"target:{deployment.name}", *(f"share:{s}" for s in deployment.shares)]
    streams = peak_streams(plan)
    if streams > settings.host_stream_budget:
        raise DistributedError(
            f"{deployment.name}: the plan reaches {streams} streams, more than a client host's "
            f"budget of {settings.host_stream_budget} (distributed.host_stream_budget)"
        )
    return [
        (exclusive, 1, 1),
        ([f"host:{host}"], streams, settings.host_stream_budget),
    ]


@contextlib.contextmanager
def _holding(limits: list[tuple[list[str], int, int]], lease_s: float) -> Iterator[None]:
    """Take the limits in one order (exclusive ones first, then the host's streams), so two
    children never wait on each other in a circle."""
    # Prefect stays imported in the function: loading it adds 0.44 s to the 0.8 s import of
    # sparkcap.night.steps, which every local (--no-prefect) night pays
    from prefect.concurrency.sync import concurrency

    with contextlib.ExitStack() as stack:
        for names, occupy, size in limits:
            for name in names:
                ensure_limit(name, size)
            stack.enter_context(
                concurrency(names, occupy=occupy, lease_duration=lease_s, strict=True)
            )
        yield


@contextlib.contextmanager
def _heartbeat(lake: Lake, key: ChildKey, attempt: int, every_s: float) -> Iterator[None]:
    """The lake heartbeat: what tells the parent (and a later ``--finish``) that this child
    still lives; Prefect marks no run crashed when its whole host dies. The first beat is
    written before this returns: the stand-down check after it relies on that order."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            with contextlib.suppress(Exception):  # a missed beat is only a later one
                lake.heartbeat(key, attempt)

    lake.heartbeat(key, attempt)
    thread = threading.Thread(target=beat, name="sparkcap-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


@dataclass
class ChildOutcome:
    state: str  # ok / failed / stood down (the parent gave it up before it measured)
    waves: int = 0
    reason: str | None = None


def sweep_child(spec: ChildSpec, progress: ProgressFn | None = None) -> ChildOutcome:
    """One deployment × workload of a distributed night: preflight, take the limits, sweep,
    land every wave in the lake. Never opens the warehouse."""
    fleet = fleet_for(spec.fleet_path, spec.profile, search=spec.search)
    fd = next((d for d in fleet.deployments if d.name == spec.deployment), None)
    if fd is None:
        raise DistributedError(f"fleet {spec.fleet_path} has no deployment {spec.deployment}")
    plan = fd.plans.get(spec.workload, fleet.workloads[spec.workload])
    dep = fd.resolve(spec.endpoint)
    host = get_settings().client_host
    # as a local night does (sweeps.within_host_budget): a search never plans waves this
    # host's own self-test could not time; capped before the limits reserve the plan's peak
    plan, capped = plan_within_budget(plan, read_budget(host=host))
    if capped is not None:
        log.warning("%s/%s: %s", spec.deployment, spec.workload, capped)
    lake, key = Lake(spec.lake), spec.key
    settings = fleet.distributed
    outcome = ChildOutcome("ok")
    started = time.time()

    def status(state: str, reason: str | None = None) -> None:
        lake.write_status(
            key, state=state, reason=reason, host=host, started=started, waves=outcome.waves
        )

    async def land(wave: WaveRecord) -> None:
        await asyncio.to_thread(lake.write_wave, key, wave)
        outcome.waves += 1
        if progress is not None:
            progress(wave, outcome.waves, outcome.waves)

    with _heartbeat(lake, key, spec.attempt, max(1.0, settings.stall_s / 6)):
        if lake.is_stood_down(key, spec.attempt):
            # given back (or given up) while this process was starting: no status, no
            # request; the parent sees a flow run that ended without a word and judges it
            return ChildOutcome(
                "stood down", reason="given up by the parent before its first request"
            )
        status("running")
        try:
            asyncio.run(preflight(dep))
            judge = None
            if plan.search is not None:
                judge = SearchJudge.compile(fleet.threshold_tok_s)
            with _holding(child_limits(fd, plan, settings, host), settings.lease_s):
                # dbt's client-spoiled rule, with the judge's vars (one compile for both)
                client_rule = ClientSpoiledRule.compile(fleet.threshold_tok_s)
                before, after = with_power(dep, scrape_into(dep))
                asyncio.run(
                    run_sweep(
                        dep,
                        spec.workload,
                        plan,
                        spec.run_id,
                        on_wave=land,
                        before_wave=before,
                        after_wave=after,
                        judge=judge,
                        client_rule=client_rule,
                    )
                )
        except (PreflightError, EndpointDown, DistributedError) as exc:
            outcome.state, outcome.reason = "failed", str(exc)
        except BaseException as exc:
            outcome.state, outcome.reason = "failed", f"{type(exc).__name__}: {exc}"[:500]
            status("failed", outcome.reason)
            raise
        status(outcome.state, outcome.reason)
    return outcome
