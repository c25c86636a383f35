"""A night spread over Prefect workers on many client hosts, landing in one warehouse.

One process cannot sweep a 100-deployment fleet in a night (a client process saturates at a
few hundred streams), and DuckDB takes one writer. So a distributed night is:

- **the parent** (``sweep_distributed``, the sweep step of a ``Night`` with ``distributed``):
  records the run, makes sure the child deployment and the concurrency limits exist, starts one
  child flow run per deployment × workload on the work pool (``run_deployment(timeout=0)``),
  waits for them all, then, as the only writer, stages the lake (``sparkcap.store.lake``) and
  records what each deployment's children did; the rest of the night (probes, validate, dbt,
  report) runs once, as on one machine;
- **the children** (``sweep_child``, run by ``flows/distributed.py`` on whichever worker takes
  them): sweep one deployment × workload and write each wave to the lake, never the warehouse.
  A child holds Prefect global concurrency limits while it sweeps: ``target:<deployment>``
  (one sweep per target at a time), ``share:<name>`` for each link or node the fleet file says
  the deployment shares (deployments sharing one never run together), and
  ``host:<client host>`` occupying the plan's peak streams out of the host's stream budget.

A child that fails says why in its status file; one whose worker dies stops its heartbeat and
is declared lost after ``stall_s`` (its flow run is marked crashed); one no worker takes before
the window closes is cancelled. Each costs its deployment × workload only: what it landed is
staged, and the night names what is missing and why (``raw.step_outcomes``). A parent that
dies leaves its children sweeping into the lake; ``finish_distributed`` (``sparkcap run
--finish RUN_ID``) later does what the parent would have done after its wait, from the
children's own statuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from sparkcap.config import SweepPlan, WorkloadName
from sparkcap.config.fleet import Distributed, Fleet, FleetDeployment
from sparkcap.errors import SparkcapError
from sparkcap.store.lake import ChildKey, Lake, stage_lake

if TYPE_CHECKING:
    from sparkcap.night.plan import Night
    from sparkcap.night.sweeps import RunResult

CHILD_FLOW = "sparkcap-sweep-target"
CHILD_ENTRYPOINT = "flows/distributed.py:sweep_target"


class DistributedError(SparkcapError, RuntimeError):
    """A distributed night that cannot start (no Prefect server, no pool); one line."""


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
    from prefect.concurrency.sync import concurrency

    from sparkcap.night.schedule import ensure_limit

    with contextlib.ExitStack() as stack:
        for names, occupy, size in limits:
            for name in names:
                ensure_limit(name, size)
            stack.enter_context(
                concurrency(names, occupy=occupy, lease_duration=lease_s, strict=True)
            )
        yield


@contextlib.contextmanager
def _heartbeat(lake: Lake, key: ChildKey, every_s: float) -> Iterator[None]:
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            with contextlib.suppress(Exception):  # a missed beat is only a later one
                lake.heartbeat(key)

    lake.heartbeat(key)
    thread = threading.Thread(target=beat, name="sparkcap-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


@dataclass
class ChildOutcome:
    state: str  # ok / failed
    waves: int = 0
    reason: str | None = None


def sweep_child(spec: ChildSpec, progress: Any = None) -> ChildOutcome:
    """One deployment × workload of a distributed night: preflight, take the limits, sweep,
    land every wave in the lake. Never opens the warehouse."""
    from sparkcap.loadgen.metrics import scrape_into
    from sparkcap.loadgen.sweep import EndpointDown, run_sweep
    from sparkcap.night.plan import fleet_for
    from sparkcap.night.sweeps import PreflightError, preflight
    from sparkcap.settings import get_settings

    fleet = fleet_for(spec.fleet_path, spec.profile, search=spec.search)
    fd = next((d for d in fleet.deployments if d.name == spec.deployment), None)
    if fd is None:
        raise DistributedError(f"fleet {spec.fleet_path} has no deployment {spec.deployment}")
    plan = fd.plans.get(spec.workload, fleet.workloads[spec.workload])
    dep = fd.resolve(spec.endpoint)
    host = get_settings().client_host
    lake, key = Lake(spec.lake), spec.key
    settings = fleet.distributed
    outcome = ChildOutcome("ok")
    started = time.time()

    def status(state: str, reason: str | None = None) -> None:
        lake.write_status(
            key, state=state, reason=reason, host=host, started=started, waves=outcome.waves
        )

    async def land(wave: Any) -> None:
        await asyncio.to_thread(lake.write_wave, key, wave)
        outcome.waves += 1
        if progress is not None:
            progress(wave, outcome.waves, outcome.waves)

    status("running")
    with _heartbeat(lake, key, max(1.0, settings.stall_s / 6)):
        try:
            asyncio.run(preflight(dep))
            judge = None
            if plan.search is not None:
                from sparkcap.transform.live_judge import SearchJudge

                judge = SearchJudge.compile(fleet.threshold_tok_s)
            with _holding(child_limits(fd, plan, settings, host), settings.lease_s):
                before, after = scrape_into(dep)
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


# -- the parent ----------------------------------------------------------------------------


def lake_url(fleet: Fleet) -> str:
    """The lake as every host must reach it: a URL as given, a path made absolute."""
    from sparkcap.settings import get_settings

    given = fleet.distributed.lake
    if given and "://" in given:
        return given
    return str(Path(given or get_settings().work_dir / "lake").resolve())


def check_budgets(fleet: Fleet) -> None:
    """Before anything is recorded: every deployment × workload must fit a client host's
    stream budget (a child that cannot would only fail on its worker)."""
    for d in fleet.deployments:
        for wl, plan in fleet.workloads.items():
            if d.workloads is None or wl in d.workloads:
                child_limits(d, d.plans.get(wl, plan), fleet.distributed, "any")


def ensure_child_deployment(pool: str) -> str:
    """The Prefect deployment children run from, on ``pool`` (created if missing, updated to
    this install's project folder): ``<flow>/<pool>``."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
    from prefect.flows import load_flow_from_entrypoint
    from prefect.utilities.callables import parameter_schema

    from sparkcap.resources import part_dir

    project = part_dir("flows").parent
    flow: Any = load_flow_from_entrypoint(str(project / CHILD_ENTRYPOINT))
    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(pool)
        except ObjectNotFound:
            with contextlib.suppress(ObjectAlreadyExists):
                client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
        flow_id = client.create_flow_from_name(CHILD_FLOW)
        client.create_deployment(
            flow_id=flow_id,
            name=pool,
            entrypoint=CHILD_ENTRYPOINT,
            path=str(project),
            work_pool_name=pool,
            parameter_openapi_schema=parameter_schema(flow).model_dump_for_openapi(),
            pull_steps=[
                {"prefect.deployments.steps.set_working_directory": {"directory": str(project)}}
            ],
            job_variables={"env": {"DO_NOT_TRACK": "1", "GX_ANALYTICS_ENABLED": "False"}},
        )
    return f"{CHILD_FLOW}/{pool}"


@dataclass
class ChildRun:
    spec: ChildSpec
    flow_run_id: Any
    state: str = "SCHEDULED"
    message: str = ""
    verdict: str | None = None  # ok / failed, once final
    reason: str | None = None
    resubmitted: int = 0


@dataclass
class FanOut:
    children: list[ChildRun] = field(default_factory=list)


def require_server() -> None:
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        raise DistributedError(
            "a distributed night needs a Prefect server its workers share: set PREFECT_API_URL "
            "(docs/guides/scale-out.md)"
        )


def fan_out(night: Night, run_id: str, day: str, lake: str) -> tuple[FanOut, str]:
    from sparkcap.night.schedule import ensure_limit

    fleet = night.fleet
    settings = fleet.distributed
    if night.fleet_path is None:
        raise DistributedError("a distributed night needs its fleet file (children read it)")
    name = ensure_child_deployment(settings.pool)
    for d in fleet.deployments:
        ensure_limit(f"target:{d.name}", 1)
        for s in d.shares:
            ensure_limit(f"share:{s}", 1)
    out = FanOut()
    eps = night.endpoints or {}
    for dep, workload in fleet.planned_waves():
        spec = ChildSpec(
            fleet_path=str(night.fleet_path),
            profile=night.profile,
            search=night.search,
            deployment=dep,
            workload=workload,
            run_id=run_id,
            night=day,
            lake=lake,
            endpoint=eps.get(dep),
        )
        out.children.append(ChildRun(spec, submit(name, spec)))
    return out, name


def submit(deployment_name: str, spec: ChildSpec) -> Any:
    """Start one child flow run on the pool and return its id, without waiting for it."""
    from prefect.deployments import run_deployment

    fr: Any = run_deployment(
        deployment_name,
        parameters={"spec": spec.model_dump(mode="json")},
        timeout=0,
        flow_run_name=f"{spec.deployment}-{spec.workload}-{spec.run_id}",
        tags=[f"sparkcap-run:{spec.run_id}"],
    )
    return fr.id


def wait_for_children(
    fan: FanOut,
    lake: Lake,
    settings: Distributed,
    resubmit: Callable[[ChildSpec], Any] | None = None,
    on_change: Callable[[ChildRun], None] | None = None,
) -> None:
    """Until every child is final. A running child whose heartbeat stops is lost (its host or
    worker died; what it landed is kept, it is not run again: a sweep half measured twice
    would be two measurements). A child a worker took but never started (pending, no
    heartbeat, for ``stall_s``) died with that worker before measuring anything: it goes back
    to the pool once (``resubmit``), for another worker. One that no worker took before the
    window closed is cancelled. Each is marked in Prefect and named."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.states import Cancelled, Crashed

    deadline = time.monotonic() + settings.window_s
    waiting = {c.flow_run_id: c for c in fan.children}
    silent_since: dict[Any, float] = {}
    with get_client(sync_client=True) as client:

        def close(child: ChildRun, state: Any, reason: str, named: bool = True) -> None:
            """Mark the child's flow run in Prefect (so no one waits on it) and stop waiting."""
            client.set_flow_run_state(child.flow_run_id, state(message=reason), force=True)
            del waiting[child.flow_run_id]
            if named:
                child.reason, child.state = reason, state.__name__.upper()
            if on_change is not None:
                on_change(child)

        while waiting:
            runs = client.read_flow_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=list(waiting)))
            )
            now = time.monotonic()
            for fr in runs:
                child = waiting[fr.id]
                st = fr.state
                before = child.state
                child.state = st.type.value if st else "UNKNOWN"
                child.message = (st.message or "") if st else ""
                if on_change is not None and child.state != before:
                    on_change(child)
                if st is not None and st.is_final():
                    del waiting[fr.id]
                    continue
                age = lake.heartbeat_age_s(child.spec.key)
                wl = child.spec.workload
                # silent: since the last heartbeat, or since first seen without one
                silent_s = age if age is not None else now - silent_since.setdefault(fr.id, now)
                if st is not None and st.is_running() and silent_s > settings.stall_s:
                    host = (lake.read_status(child.spec.key) or {}).get("host", "?")
                    close(
                        child,
                        Crashed,
                        f"{wl}: lost (no heartbeat for {silent_s:.0f} s from client host "
                        f"{host}: its worker or host died)",
                    )
                elif (
                    st is not None
                    and st.is_pending()
                    and age is None
                    and silent_s > settings.stall_s
                ):
                    again = resubmit is not None and child.resubmitted == 0
                    why = (
                        f"{wl}: taken by a worker that stopped before starting it "
                        f"(pending {silent_s:.0f} s)"
                    )
                    close(child, Crashed, why, named=not again)
                    if again and resubmit is not None:
                        retry = ChildRun(child.spec, resubmit(child.spec), resubmitted=1)
                        fan.children[fan.children.index(child)] = retry
                        waiting[retry.flow_run_id] = retry
                elif st is not None and st.is_scheduled() and now > deadline:
                    close(
                        child,
                        Cancelled,
                        f"{wl}: never started (no worker took it within the night's window "
                        f"of {settings.window_s:.0f} s)",
                    )
            if waiting:
                time.sleep(settings.poll_s)


def _say_child(child: ChildRun, lake: Lake) -> None:
    """A child's change of state, to the run log and to a CLI watching the night."""
    from sparkcap.night import progress

    status = lake.read_status(child.spec.key) or {}
    where = f" on {status['host']}" if status.get("host") else ""
    text = f"{child.spec.deployment}/{child.spec.workload}: {child.state.lower()}{where}" + (
        f" ({child.reason})" if child.reason else ""
    )
    progress.note(text)
    with contextlib.suppress(Exception):  # outside a flow run there is no run logger
        from prefect.logging import get_run_logger

        get_run_logger().info(text)


def _verdict(child: ChildRun, lake: Lake) -> None:
    """The child's own account when it has one; Prefect's state otherwise."""
    status = lake.read_status(child.spec.key)
    wl = child.spec.workload
    if child.reason is not None:
        child.verdict = "failed"
    elif status is not None and status.get("state") in ("ok", "failed"):
        child.verdict = str(status["state"])
        if child.verdict == "failed":
            child.reason = f"{wl}: {status.get('reason') or 'failed'}"
    elif child.state == "COMPLETED":
        child.verdict, child.reason = "failed", f"{wl}: finished without a status in the lake"
    else:
        child.verdict = "failed"
        child.reason = f"{wl}: child flow run {child.state.lower()}" + (
            f": {child.message}" if child.message else ""
        )


def record_night_start(night: Night, run_id: str, day: str, url: str) -> None:
    """The run's row, before any child starts. It keeps the lake and the night partition the
    children write to: what a later ``--finish`` reads their statuses from."""
    from sparkcap.store.warehouse import run_start_to

    fleet = night.fleet
    eps = night.endpoints or {}
    deployments = [d.resolve(eps.get(d.name)) for d in fleet.deployments]
    config = {
        "fleet": fleet.model_dump(mode="json"),
        "distributed": {"pool": fleet.distributed.pool, "lake": url, "night": day},
        "endpoints": {d.name: str(d.endpoint) for d in deployments},
    }
    run_start_to(night.db_path, run_id, config, time.time_ns(), deployments)


def sweep_distributed(night: Night) -> RunResult:
    """The sweep step of a distributed night (see the module's docstring)."""
    from sparkcap.loadgen.sweep import new_run_id
    from sparkcap.night.sweeps import RunResult
    from sparkcap.store.warehouse import run_end_to

    require_server()
    fleet = night.fleet
    check_budgets(fleet)
    run_id = night.run_id or new_run_id()
    day = datetime.now(UTC).date().isoformat()
    url = lake_url(fleet)
    lake = Lake(url)
    record_night_start(night, run_id, day, url)
    result = RunResult(run_id=run_id, db_path=night.db_path)
    try:
        fan, child_deployment = fan_out(night, run_id, day, url)
        wait_for_children(
            fan,
            lake,
            fleet.distributed,
            lambda spec: submit(child_deployment, spec),
            lambda child: _say_child(child, lake),
        )
    except BaseException as exc:
        result.status, result.reason = "incomplete", f"{type(exc).__name__}: {exc}"[:500]
        run_end_to(night.db_path, run_id, "incomplete", result.reason)
        raise
    return _land(night, lake, fan, result)


def finish_distributed(night: Night) -> RunResult:
    """The sweep step of a night whose parent stopped (killed, its host rebooted) after
    starting the children: no fan-out and no waiting, only what the lake holds."""
    from sparkcap.night.sweeps import RunResult

    run_id = night.require_run_id()
    fan = children_to_finish(night.fleet, night.db_path, run_id)
    lake = Lake(fan.children[0].spec.lake) if fan.children else Lake(lake_url(night.fleet))
    return _land(night, lake, fan, RunResult(run_id, night.db_path))


def children_to_finish(fleet: Fleet, db_path: Path, run_id: str) -> FanOut:
    """How each child of a stopped parent's night ended, from its own status in the lake; read
    only, so the CLI refuses a finish before anything starts. One still running (a fresh
    heartbeat) refuses it, since staging now would keep half its sweep; one whose heartbeat
    went silent is lost and one with no status never started: both named, as the parent
    would have named them."""
    from sparkcap.store.warehouse import open_warehouse

    if not Path(db_path).exists():
        raise DistributedError(f"no database at {db_path}: finish a night against its parent's")
    with open_warehouse(db_path, read_only=True) as con:
        row = con.execute(
            "select config_json, started_at from raw.runs where run_id = ?", [run_id]
        ).fetchone()
    if row is None:
        raise DistributedError(
            f"run {run_id} is not in {db_path}: finish a night against the database its "
            "parent started it in (it records the run before starting any child)"
        )
    recorded = (json.loads(row[0]) if row[0] else {}).get("distributed") or {}
    if not recorded:
        raise DistributedError(f"run {run_id} was not a distributed night: nothing to finish")
    url = str(recorded.get("lake") or lake_url(fleet))
    day = str(recorded.get("night") or row[1].astimezone(UTC).date().isoformat())
    lake = Lake(url)
    fan = FanOut()
    for dep, workload in fleet.planned_waves():
        spec = ChildSpec(
            fleet_path="",
            profile="full",
            deployment=dep,
            workload=workload,
            run_id=run_id,
            night=day,
            lake=url,
        )
        child = ChildRun(spec, flow_run_id=None, state="UNKNOWN")
        status = lake.read_status(spec.key)
        age = lake.heartbeat_age_s(spec.key)
        if status is None:
            child.reason = f"{workload}: never started (no status in the lake {url})"
        elif status.get("state") == "running":
            host = status.get("host", "?")
            if age is not None and age <= fleet.distributed.stall_s:
                raise DistributedError(
                    f"{dep}/{workload} of run {run_id} is still running on {host} (heartbeat "
                    f"{age:.0f} s ago): finish the night once it has ended"
                )
            silent = f"{age:.0f} s" if age is not None else "ever"
            child.reason = (
                f"{workload}: lost (no heartbeat for {silent} from client host {host}: its "
                "worker or host died)"
            )
        fan.children.append(child)
    return fan


def _land(night: Night, lake: Lake, fan: FanOut, result: RunResult) -> RunResult:
    """The one writer: stage what the children landed, then record each deployment's
    outcome and the run's end."""
    from sparkcap.store.warehouse import record_step_to, run_end_to

    run_id = result.run_id
    staged = stage_lake(night.db_path, lake, run_id)
    result.n_staged = staged.staged + staged.already
    why: dict[str, list[str]] = {}
    for child in fan.children:
        _verdict(child, lake)
        if child.verdict != "ok" and child.reason:
            why.setdefault(child.spec.deployment, []).append(child.reason)
    for dep, problems in staged.rejected_by_deployment.items():
        why.setdefault(dep, []).append(
            f"{len(problems)} wave(s) failed verification, not staged: {problems[0]}"
        )
    for d in night.fleet.deployments:
        reasons = why.get(d.name)
        text = "; ".join(reasons) if reasons else None
        record_step_to(night.db_path, run_id, d.name, "sweep", "failed" if text else "ok", text)
        if text:
            result.not_measured[d.name] = text
    if result.not_measured:
        result.status = "incomplete"
        result.reason = "; ".join(f"{k}: {v}" for k, v in result.not_measured.items())[:1000]
    run_end_to(night.db_path, run_id, result.status, result.reason)
    return result
