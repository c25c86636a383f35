"""The parent of a distributed night (the sweep step of a ``Night`` with ``distributed``): it
records the run, makes sure the child deployment and the concurrency limits exist, gives each
deployment × workload its own child flow run on the work pool (``run_deployment(timeout=0)``),
watches them (``watch``), then, as the only writer, stages what they landed in the lake and
records what each deployment's children did. The rest of the night (probes, validate, dbt,
report) runs once, as on one machine."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sparkcap.config.deployment import Deployment
from sparkcap.config.fleet import Fleet
from sparkcap.errors import DistributedError, PreflightError
from sparkcap.loadgen.discover import DISCOVERY, LISTING, FactRow, discover_facts
from sparkcap.loadgen.sweep import new_run_id
from sparkcap.night.distributed.child import CHILD_ENTRYPOINT, CHILD_FLOW, ChildSpec, child_limits
from sparkcap.night.distributed.rules import child_account
from sparkcap.night.distributed.watch import ChildRun, FanOut, say_child, wait_for_children
from sparkcap.night.plan import Night
from sparkcap.night.schedule import ensure_limit
from sparkcap.night.sweeps import RunResult, preflight
from sparkcap.resources import part_dir
from sparkcap.settings import get_settings
from sparkcap.store.lake import Lake, stage_lake
from sparkcap.store.runs import (
    record_client_hosts_to,
    record_discovered_facts_to,
    record_step_to,
    run_end_to,
    run_start_to,
)

# Prefect is imported in the functions that call it: loading it adds 0.44 s to the 0.8 s
# import of sparkcap.night.steps, which every local (--no-prefect) night pays.


def lake_url(fleet: Fleet) -> str:
    """The lake as every host must reach it: a URL as given, a path made absolute."""
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


def require_server() -> None:
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        raise DistributedError(
            "a distributed night needs a Prefect server its workers share: set PREFECT_API_URL "
            "(docs/guides/scale-out.md)"
        )


def ensure_child_deployment(pool: str) -> str:
    """The Prefect deployment children run from, on ``pool`` (created if missing, updated to
    this install's project folder): ``<flow>/<pool>``."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
    from prefect.flows import load_flow_from_entrypoint
    from prefect.utilities.callables import parameter_schema

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


def fan_out(night: Night, run_id: str, day: str, lake: str) -> tuple[FanOut, str]:
    """One child flow run per planned deployment × workload, each its own share of the
    night; returns them and the child deployment they run from."""
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


def record_night_start(night: Night, run_id: str, day: str, url: str) -> None:
    """The run's row, before any child starts. It keeps the lake and the night partition the
    children write to: what a later ``--finish`` reads their statuses from."""
    fleet = night.fleet
    eps = night.endpoints or {}
    deployments = [d.resolve(eps.get(d.name)) for d in fleet.deployments]
    config = {
        "fleet": fleet.model_dump(mode="json"),
        "distributed": {"pool": fleet.distributed.pool, "lake": url, "night": day},
        "endpoints": {d.name: str(d.endpoint) for d in deployments},
    }
    run_start_to(night.db_path, run_id, config, time.time_ns(), deployments)
    # as a local night does: what each server says of itself, asked from the parent's host
    for dep, rows in zip(deployments, asyncio.run(discover_night(deployments)), strict=True):
        record_discovered_facts_to(night.db_path, run_id, dep.name, rows)


async def discover_night(deployments: list[Deployment]) -> list[list[FactRow]]:
    """Each deployment's facts and run context, after its own preflight; one the parent
    cannot reach (its children may) is a ``discovery`` row saying so, never an error."""

    async def one(dep: Deployment) -> list[FactRow]:
        try:
            listing = await preflight(dep)
        except PreflightError as exc:
            return [FactRow(DISCOVERY, None, LISTING, f"preflight from the parent: {exc}"[:300])]
        return await discover_facts(dep, listing=listing, context=True)

    return list(await asyncio.gather(*(one(d) for d in deployments)))


def sweep_distributed(night: Night) -> RunResult:
    """The sweep step of a distributed night (see the module's docstring)."""
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
            lambda child: say_child(child, lake),
        )
    except BaseException as exc:
        result.status, result.reason = "incomplete", f"{type(exc).__name__}: {exc}"[:500]
        run_end_to(night.db_path, run_id, "incomplete", result.reason)
        raise
    return land(night, lake, fan, result)


def account(child: ChildRun, lake: Lake) -> None:
    """The child's ``verdict`` and ``reason`` (``rules.child_account``), from its own status in
    the lake and the state it ended in."""
    status = lake.read_status(child.spec.key) or {}
    state = status.get("state")
    child.verdict, child.reason = child_account(
        child.spec.workload,
        child.reason,
        None if state is None else str(state),
        status.get("reason"),
        child.state,
        child.message,
    )


def land(night: Night, lake: Lake, fan: FanOut, result: RunResult) -> RunResult:
    """The one writer: stage what the children landed, then record each deployment's
    outcome and the run's end."""
    run_id = result.run_id
    staged = stage_lake(night.db_path, lake, run_id)
    result.n_staged = staged.staged + staged.already
    why: dict[str, list[str]] = {}
    for child in fan.children:
        account(child, lake)
        if child.verdict != "ok" and child.reason:
            why.setdefault(child.spec.deployment, []).append(child.reason)
    for dep, problems in staged.rejected_by_deployment.items():
        why.setdefault(dep, []).append(
            f"{len(problems)} wave(s) failed verification, not staged: {problems[0]}"
        )
    # the client host of record is the one each deployment's children measured from
    hosts: dict[str, set[str]] = {}
    for child in fan.children:
        host = (lake.read_status(child.spec.key) or {}).get("host")
        if isinstance(host, str) and host:
            hosts.setdefault(child.spec.deployment, set()).add(host)
    if hosts:
        record_client_hosts_to(
            night.db_path, run_id, {d: ", ".join(sorted(h)) for d, h in hosts.items()}
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
