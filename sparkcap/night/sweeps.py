"""A run: preflight, sweeps, and wave-by-wave staging into the warehouse.

This is the one implementation behind ``sparkcap sweep`` and the Prefect flows. A run is
recorded in ``raw.runs`` only once preflight has passed (nothing is written for a run that
never started); each wave is staged in its own transaction as soon as it ends; a run that
stops early is marked ``incomplete`` with the reason, keeping every wave already staged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

from sparkcap.config.deployment import Deployment
from sparkcap.config.fleet import Fleet
from sparkcap.config.plan import SweepPlan, SweepRequest, planned_wave_count
from sparkcap.config.probes import ProbeOptions, probe_options
from sparkcap.errors import (
    LocalServerError,
    MissingSecret,
    NotFound,
    PreflightError,
    WarehouseBusy,
)
from sparkcap.loadgen.connections import FetchFailed, fetch_bounded, make_client
from sparkcap.loadgen.discover import discover_all
from sparkcap.loadgen.links import LinkResult, run_links
from sparkcap.loadgen.metrics import scrape_into
from sparkcap.loadgen.power import with_power
from sparkcap.loadgen.probes import PROBES
from sparkcap.loadgen.records import WaveRecord
from sparkcap.loadgen.sweep import (
    EndpointDown,
    new_run_id,
    request_headers,
    run_sweep,
)
from sparkcap.night.calibrate import HostBudget, plan_within_budget, read_budget
from sparkcap.night.progress import NightProgress, planned_waves
from sparkcap.servers.llama import LocalServer, launched
from sparkcap.store import spool
from sparkcap.store.connection import open_warehouse
from sparkcap.store.links import store_link_results
from sparkcap.store.runs import record_discovered_facts_to, record_step_to, run_end_to, run_start_to
from sparkcap.transform.dbt_build import judgement_vars
from sparkcap.transform.live_judge import ClientSpoiledRule, SearchJudge

ProgressFn = Callable[[WaveRecord, int, int], None]
T = TypeVar("T")
log = logging.getLogger(__name__)

# set by run_interruptibly's SIGINT handler while a sweep runs: the CancelledError a Ctrl-C
# becomes inside the sweep has no text of its own
_interrupted_by: str | None = None
CTRL_C = "Ctrl-C"


def run_interruptibly(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` for a sweep or probe. The first Ctrl-C cancels it as ``asyncio.run``
    would, but the run row then says it was interrupted by Ctrl-C (``stop_reason``), and it
    ends in ``KeyboardInterrupt`` for the CLI to word; a second Ctrl-C stops at once. Off the
    main thread signals never arrive, so there it is plain ``asyncio.run``."""
    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(main)
    return asyncio.run(_cancelled_by_ctrl_c(main))


def sweep_watched(requests: Sequence[SweepRequest], db_path: Path, *, run_id: str) -> RunResult:
    """``sparkcap sweep``: the sweep with a progress line per deployment × workload while it
    runs; a Ctrl-C leaves the run row saying so and ends in ``KeyboardInterrupt``."""
    with NightProgress(planned_waves(requests)) as board:
        return run_interruptibly(run_sweeps(requests, db_path, run_id=run_id, progress=board))


def serve_until_stopped(server: LocalServer) -> None:
    """Hold a launched llama-server until Ctrl-C or SIGTERM (a service manager's stop), or
    until it exits on its own, then stop it; exiting with a failure of its own is an error."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.is_set() and server.process.poll() is None:
            stop.wait(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    if server.process.returncode not in (0, -15, None) and not stop.is_set():
        raise LocalServerError(f"llama-server exited with {server.process.returncode}")


async def _cancelled_by_ctrl_c(main: Coroutine[Any, Any, T]) -> T:
    global _interrupted_by
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None

    def on_sigint(signum: int, frame: object) -> None:
        global _interrupted_by
        if _interrupted_by is not None:
            raise KeyboardInterrupt  # the second Ctrl-C: no more waiting
        _interrupted_by = CTRL_C
        loop.call_soon_threadsafe(task.cancel, f"interrupted ({CTRL_C})")

    _interrupted_by = None
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        return await main
    except asyncio.CancelledError:
        if _interrupted_by is not None:
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
        _interrupted_by = None


def stop_reason(exc: BaseException) -> str:
    """Why a run stopped early, for ``raw.runs.status_reason``: an interruption says so (a bare
    ``CancelledError`` reads "CancelledError: "), and that what it measured is kept."""
    if isinstance(exc, KeyboardInterrupt | asyncio.CancelledError):
        if isinstance(exc, KeyboardInterrupt) or _interrupted_by is not None:
            how = f"interrupted ({_interrupted_by or CTRL_C})"
        else:
            how = f"interrupted (cancelled: {exc})" if str(exc) else "interrupted (cancelled)"
        return f"{how}: every wave finished before it is kept, the wave in flight is not"
    return f"{type(exc).__name__}: {exc}"[:500]


# a models listing is a few KiB; the preflight never waits or holds more than this for one
PREFLIGHT_TOTAL_S = 30.0
MAX_MODELS_LISTING_BYTES = 1 << 20


async def preflight(deployment: Deployment) -> dict[str, Any] | None:
    """Fail fast, before anything is recorded, when an endpoint cannot serve the model.
    Returns the server's model listing when it gave one (a JSON object), for discovery to
    read rather than ask the server again."""
    url = deployment.models_url  # the endpoint's query string (Azure's api-version) kept
    try:
        headers = request_headers(deployment)
    except MissingSecret as exc:  # this deployment cannot be measured; the others can
        raise PreflightError(str(exc)) from None
    async with make_client(deployment, 1) as client:
        try:
            # bounded like a scrape: a listing that trickles or never ends cannot hold a night
            status, body = await fetch_bounded(
                client, url, headers, PREFLIGHT_TOTAL_S, MAX_MODELS_LISTING_BYTES
            )
        except FetchFailed as failed:
            cause = failed.cause
            if isinstance(cause, httpx.ConnectError):
                detail = str(cause).strip().splitlines()[0][:200] if str(cause).strip() else ""
                raise PreflightError(
                    f"endpoint unreachable: {deployment.endpoint} ({deployment.name}): "
                    f"{type(cause).__name__}" + (f" ({detail})" if detail else "")
                ) from None
            if cause is not None:
                raise PreflightError(
                    f"endpoint failed: {deployment.endpoint} ({deployment.name}): "
                    f"{type(cause).__name__}"
                ) from None
            return None  # oversized, compressed or endless: the sweep judges each stream
    if status in (401, 403):
        raise PreflightError(
            f"endpoint refused the credentials for {deployment.name} (HTTP {status}); "
            f"check the variable named by api_key_env"
        )
    if status != 200:
        return None  # servers without /models are measured anyway
    try:
        listing = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested past what Python can parse
        return None
    if not isinstance(listing, dict):
        return None
    # a server's listing is untrusted: anything but {"data": [{"id": ...}, ...]} says nothing
    data = listing.get("data")
    if not isinstance(data, list):
        return listing
    ids = {str(m["id"]) for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)}
    if ids and deployment.model not in ids:
        shown = sorted(i if len(i) <= 80 else i[:79] + "…" for i in ids)
        more = f" and {len(shown) - 10} more" if len(shown) > 10 else ""
        raise PreflightError(
            f"unknown model {deployment.model!r} at {deployment.endpoint} "
            f"(server offers: {', '.join(shown[:10])}{more})"
        )
    return listing


def open_run_for(db_path: Path, run: str, deployment: str, workloads: Sequence[str]) -> str:
    """The run a hand-made sweep joins (``sparkcap sweep --run ID|latest``), so that several
    deployments swept one after another read as one report. A deployment × workload the run
    already holds is refused: its waves would replace the ones measured before."""

    with open_warehouse(db_path, read_only=True) as con:
        if run == "latest":
            row = con.execute(
                "select run_id from raw.runs order by started_at desc limit 1"
            ).fetchone()
            if row is None:
                raise NotFound(f"no runs in {db_path} to add to (leave out --run)")
            run = str(row[0])
        elif con.execute("select 1 from raw.runs where run_id = ?", [run]).fetchone() is None:
            raise NotFound(f"no run {run} in {db_path}")
        taken = con.execute(
            "select distinct workload from raw.waves where run_id = ? and deployment = ? "
            "and probe is null and list_contains(?, workload)",
            [run, deployment, list(workloads)],
        ).fetchall()
    if taken:
        raise NotFound(
            f"run {run} already holds {deployment}/{taken[0][0]}: sweep it under another "
            "deployment name or into a new run"
        )
    return run


@dataclass
class RunResult:
    run_id: str
    db_path: Path
    waves: list[WaveRecord] = field(default_factory=list)
    status: str = "complete"
    reason: str | None = None
    unstaged: list[str] = field(default_factory=list)
    n_staged: int = 0  # a distributed night's waves, staged from the lake
    # deployment -> why it could not be (fully) measured; also in raw.step_outcomes
    not_measured: dict[str, str] = field(default_factory=dict)


async def run_sweeps(
    requests: Sequence[SweepRequest],
    db_path: Path,
    *,
    run_id: str | None = None,
    config: dict[str, Any] | None = None,
    progress: ProgressFn | None = None,
    parallel_deployments: bool = False,
    threshold_tok_s: float | None = None,
) -> RunResult:
    """Sweep each request, staging every wave as it ends; returns what was recorded.

    A deployment that fails preflight is left out and recorded as not measured; the others
    are measured as usual. ``threshold_tok_s``: the fleet's, where it names one; else a
    search judges at the threshold the build takes (SPARKCAP_DBT_VARS, the project's). Only
    when no deployment can be measured does the run never start
    (``PreflightError``, nothing written).
    """
    deployments = {r.deployment.name: r.deployment for r in requests}
    unreachable: dict[str, str] = {}
    listings: dict[str, dict[str, Any] | None] = {}
    for dep in deployments.values():
        try:
            listings[dep.name] = await preflight(dep)
        except PreflightError as exc:
            unreachable[dep.name] = str(exc)
    if unreachable and len(unreachable) == len(deployments):
        first, *rest = unreachable.values()
        raise PreflightError(first + (f" (and {len(rest)} more)" if rest else ""))
    requests = [r for r in requests if r.deployment.name not in unreachable]
    # each plan records the tolerances dbt judges this night with (the rule is dbt's own,
    # compiled below)
    judged = await asyncio.to_thread(judgement_vars)
    tolerances = {
        "timing_error_tolerance": float(judged["timing_error_tolerance"]),
        "start_skew_tolerance": float(judged["start_skew_tolerance"]),
    }
    requests = [
        # validated, not copied over: a var the plan cannot hold is one error line before a wave
        r.model_copy(
            update={"plan": SweepPlan.model_validate({**r.plan.model_dump(), **tolerances})}
        )
        for r in requests
    ]
    # a search never plans waves this host cannot time: capped at its calibrated budget
    # (sparkcap calibrate), each change said once; no calibration file, no change
    requests = within_host_budget(requests, await asyncio.to_thread(read_budget))
    # a search decides with dbt's own rule: compiled before anything is recorded
    judge = None
    if any(r.plan.search is not None for r in requests):
        judge = await asyncio.to_thread(SearchJudge.compile, threshold_tok_s)
    # a wave is measured again exactly when dbt will call it client-spoiled: dbt's rule,
    # compiled with the judge's vars (one compile for both)
    client_rule = await asyncio.to_thread(ClientSpoiledRule.compile, threshold_tok_s)
    # waves a crashed or blocked earlier run left behind are staged before anything new
    await asyncio.to_thread(spool.stage_spool, db_path)
    run_id = run_id or new_run_id()
    result = RunResult(run_id=run_id, db_path=db_path)
    run_start_to(
        db_path,
        run_id,
        config or {"sweeps": [r.model_dump(mode="json") for r in requests]},
        time.time_ns(),
        list(deployments.values()),
    )
    for name, why in unreachable.items():
        await asyncio.to_thread(record_step_to, db_path, run_id, name, "preflight", "failed", why)
        result.not_measured[name] = why
    # what each server says of its decode steps, beside what the fleet file declares (the
    # bottleneck diagnosis's facts); bounded, and a failure is a recorded row, never an error
    reachable = [d for d in deployments.values() if d.name not in unreachable]
    for dep, facts in zip(reachable, await discover_all(reachable, listings), strict=True):
        await asyncio.to_thread(record_discovered_facts_to, db_path, run_id, dep.name, facts)
    total = sum(planned_wave_count(r.plan) for r in requests)
    done = 0
    stage_lock = asyncio.Lock()

    async def on_wave(wave: WaveRecord) -> None:
        nonlocal done
        async with stage_lock:  # one DuckDB writer, even with parallel deployments
            folder = await asyncio.to_thread(spool.write_wave, wave, db_path)
            try:
                await asyncio.to_thread(spool.stage_spool, db_path, None, run_id)
            except WarehouseBusy:
                result.unstaged.append(str(folder))  # kept in the spool for the next stage
        result.waves.append(wave)
        if wave.superseded_reason is None:  # a re-measured item completes with its last attempt
            done += 1
        if progress is not None:
            progress(wave, done, max(total, done))  # a search's total is an estimate

    down: dict[str, str] = {}

    async def one(req: SweepRequest) -> None:
        dep = req.deployment
        if dep.name in down:
            return  # the server is gone: its remaining sweeps would only record failures
        before, after = with_power(dep, scrape_into(dep))
        try:
            await run_sweep(
                dep,
                req.workload,
                req.plan,
                run_id,
                on_wave=on_wave,
                before_wave=before,
                after_wave=after,
                judge=judge,
                client_rule=client_rule,
            )
        except EndpointDown as exc:
            down[dep.name] = str(exc)

    try:
        if parallel_deployments:
            by_dep: dict[str, list[SweepRequest]] = {}
            for r in requests:
                by_dep.setdefault(r.deployment.name, []).append(r)

            async def serial(reqs: list[SweepRequest]) -> None:
                for r in reqs:
                    await one(r)

            await asyncio.gather(*(serial(v) for v in by_dep.values()))
        else:
            for r in requests:
                await one(r)
    except BaseException as exc:
        result.status = "incomplete"
        result.reason = stop_reason(exc)
        await asyncio.shield(
            asyncio.to_thread(run_end_to, db_path, run_id, "incomplete", result.reason)
        )
        raise
    for name in {r.deployment.name for r in requests}:
        died = down.get(name)
        await asyncio.to_thread(
            record_step_to, db_path, run_id, name, "sweep", "failed" if died else "ok", died
        )
        if died:
            result.not_measured[name] = died
    if result.not_measured:
        result.status = "incomplete"
        result.reason = "; ".join(
            f"{name} not measured: {why}" if name in unreachable else why
            for name, why in result.not_measured.items()
        )[:1000]
    run_end_to(db_path, run_id, result.status, result.reason)
    return result


def within_host_budget(
    requests: Sequence[SweepRequest], budget: HostBudget | None
) -> list[SweepRequest]:
    """Every request's plan as this host can time it (``night.calibrate``); each line saying
    what changed is logged once, however many workloads it applies to."""
    said: dict[str, None] = {}
    out: list[SweepRequest] = []
    for r in requests:
        plan, line = plan_within_budget(r.plan, budget)
        if line is not None:
            said[line] = None
        out.append(r if plan is r.plan else r.model_copy(update={"plan": plan}))
    for line in said:
        log.warning(line)
    return out


DEMO_PROFILE: dict[str, object] = {"trials": 1, "max_tokens": 64}


async def run_fleet(
    fleet: Fleet,
    db_path: Path,
    *,
    run_id: str | None = None,
    progress: ProgressFn | None = None,
    endpoints: dict[str, str] | None = None,
) -> RunResult:
    """Sweep every deployment × workload. ``endpoints``: servers a night already launched
    (``night.plan.Night``); without them, launch what the fleet asks for and stop it after."""

    with contextlib.nullcontext(endpoints) if endpoints is not None else launched(fleet) as eps:
        requests = fleet.sweep_requests(eps)
        config = {
            "fleet": fleet.model_dump(mode="json"),
            "endpoints": {r.deployment.name: str(r.deployment.endpoint) for r in requests},
        }
        return await run_sweeps(
            requests,
            db_path,
            run_id=run_id,
            config=config,
            progress=progress,
            parallel_deployments=fleet.parallel_deployments,
            threshold_tok_s=fleet.threshold_tok_s,
        )


async def run_probe(
    deployment: Deployment,
    probe: str | ProbeOptions,
    db_path: Path,
    *,
    run_id: str | None = None,
    record_run: bool = True,
    **options: Any,
) -> RunResult:
    """Run one responsiveness probe, staged like a sweep's waves: as its own run, or
    (``record_run=False``) inside an existing run such as a nightly sweep's. ``probe`` is the
    probe's options model, or its name with the options as keywords (validated the same way)."""

    chosen = probe_options(probe, **options) if isinstance(probe, str) else probe
    await preflight(deployment)
    await asyncio.to_thread(spool.stage_spool, db_path)
    run_id = run_id or new_run_id()
    config = {
        "probe": chosen.kind,
        "options": chosen.model_dump(mode="json", exclude={"kind"}),
        "deployment": deployment.model_dump(mode="json"),
    }
    if record_run:
        run_start_to(db_path, run_id, config, time.time_ns(), [deployment])
    result = RunResult(run_id=run_id, db_path=db_path)
    try:
        before, after = scrape_into(deployment)
        produced = await PROBES[chosen.kind](deployment, run_id, chosen)
        for wave in produced if isinstance(produced, list) else [produced]:
            folder = await asyncio.to_thread(spool.write_wave, wave, db_path)
            try:
                await asyncio.to_thread(spool.stage_spool, db_path, None, run_id)
            except WarehouseBusy:
                # measured and spooled: a busy database delays the probe's staging (the
                # night's stage step, or the next command's), as a sweep's, never fails it
                result.unstaged.append(str(folder))
            result.waves.append(wave)
    except BaseException as exc:
        result.status = "incomplete"
        result.reason = stop_reason(exc)
        if record_run:
            await asyncio.shield(
                asyncio.to_thread(run_end_to, db_path, run_id, "incomplete", result.reason)
            )
        raise
    del before, after
    if record_run:
        run_end_to(db_path, run_id, "complete")
    return result


async def run_fleet_probes(
    fleet: Fleet, db_path: Path, run_id: str, endpoints: dict[str, str] | None = None
) -> list[str]:
    """The probes the fleet file asks for, recorded inside the night's run.

    A probe that fails costs that probe only: its failure is recorded in
    ``raw.step_outcomes`` and the next probe runs. Returns the probes that failed, as
    ``deployment:probe``.
    """

    failed: list[str] = []
    if not any(d.probes for d in fleet.deployments):
        return failed
    with contextlib.nullcontext(endpoints) if endpoints is not None else launched(fleet) as eps:
        for d in fleet.deployments:
            for name, options in d.probes.items():
                dep = d.resolve(eps.get(d.name))
                try:
                    await run_probe(dep, options, db_path, run_id=run_id, record_run=False)
                except Exception as exc:  # any failure is this probe's alone
                    failed.append(f"{d.name}:{name}")
                    status, reason = "failed", f"{type(exc).__name__}: {exc}".strip()
                else:
                    status, reason = "ok", ""
                await asyncio.to_thread(
                    record_step_to, db_path, run_id, d.name, f"probe:{name}", status, reason
                )
    return failed


def run_link_check(
    fleet: Fleet, db_path: Path, run_id: str | None = None
) -> tuple[str, list[LinkResult]]:
    """Check every declared link; inside a night's run, or as a run of its own."""

    links = {d.name: (list(d.links), fleet.link_min_share) for d in fleet.deployments if d.links}
    own_run = run_id is None
    run_id = run_id or new_run_id()
    if own_run:
        run_start_to(db_path, run_id, {"link_check": fleet.model_dump(mode="json")}, time.time_ns())
    results = run_links(links)
    if results:
        store_link_results(db_path, run_id, results)
    for dep in links:
        errors = [f"{r.spec.name}: {r.error}" for r in results if r.deployment == dep and r.error]
        status = "failed" if errors else "ok"
        record_step_to(db_path, run_id, dep, "link-check", status, "; ".join(errors) or None)
    if own_run:
        run_end_to(db_path, run_id, "complete")
    return run_id, results
