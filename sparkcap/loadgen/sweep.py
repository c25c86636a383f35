"""A sweep: for each concurrency level, one warm-up wave, then N counted trials.

The sweep owns one ``httpx.AsyncClient`` (created here, inside the running loop, so Prefect
tasks never share a client across event loops). It knows nothing about storage: each finished
wave is handed to ``on_wave`` (the warehouse stager in practice), so a crash loses at most the
wave in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from urllib.parse import urlsplit

from pydantic import SecretStr

from sparkcap.config.deployment import Deployment, header_problem
from sparkcap.config.plan import SweepPlan, planned_wave_count
from sparkcap.errors import MissingSecret
from sparkcap.loadgen.cache_reset import reset_prefix_cache
from sparkcap.loadgen.connections import StreamClients
from sparkcap.loadgen.plan import WavePlanItem, plan_waves
from sparkcap.loadgen.procs import ClientPool, available_cores
from sparkcap.loadgen.records import Status, WaveRecord
from sparkcap.loadgen.search import Judge, run_search
from sparkcap.loadgen.sessions import build_sessions, run_session_wave
from sparkcap.loadgen.wave import run_wave, wave_target
from sparkcap.loadgen.workloads import build_streams
from sparkcap.settings import read_secret

WaveCallback = Callable[[WaveRecord], Awaitable[None] | None]
ProgressCallback = Callable[[WaveRecord, int, int], None]
# Why the client, not the server, spoiled a wave just measured (None: it did not). The rule is
# dbt's (macro client_spoiled_waves): the night compiles it (transform.live_judge
# .ClientSpoiledRule) and hands it in, so this layer neither restates it nor reads dbt.
ClientRule = Callable[[WaveRecord], str | None]


class EndpointDown(RuntimeError):
    """Every stream of a wave failed to connect: the server is gone, later waves would only
    record the same failure."""


_CONNECT_FAILURES = ("ConnectError", "connection lost", "RemoteProtocolError", "ReadError")


def endpoint_down(wave: WaveRecord) -> bool:
    reqs = wave.requests
    return bool(reqs) and all(
        r.first_token_ns is None
        and r.http_status is None
        and any(k in (r.error or "") for k in _CONNECT_FAILURES)
        for r in reqs
    )


def worth_remeasuring(wave: WaveRecord) -> bool:
    """Only a counted wave whose every stream succeeded: a failed stream is a finding about the
    server, and running its wave again would bury it (warm-ups never count anyway)."""
    return (
        wave.trial > 0 and bool(wave.requests) and all(r.status == Status.OK for r in wave.requests)
    )


def new_run_id() -> str:
    """Sortable by start time, unique across machines: ``20261129T142500Z-3f9a1c``."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def wave_id(
    run_id: str,
    deployment: str,
    workload: str,
    concurrency: int,
    trial: int,
    attempt: int = 1,
    probe: str | None = None,
) -> str:
    kind = f"/{probe}" if probe else ""
    base = f"{run_id}/{deployment}/{workload}{kind}/c{concurrency:04d}/t{trial}"
    return base if attempt == 1 else f"{base}/a{attempt}"


def request_headers(deployment: Deployment, url: str | None = None) -> dict[str, str]:
    """Every header a request to ``deployment`` carries, secrets read from the environment now.

    A header whose variable is unset raises :class:`MissingSecret` rather than being left
    out: a request without it measures a server that refuses it (or answers someone else).
    Credentials from the endpoint URL become Basic auth and, as when httpx took them from the
    URL itself, replace an API key.
    """
    headers = {"Accept": "text/event-stream"}
    headers |= {k: v.get_secret_value() for k, v in deployment.headers.items()}
    for name, env_var in deployment.header_env.items():
        value = read_secret(env_var)
        if value is None:
            raise MissingSecret(
                f"{deployment.name}: header {name!r} is to come from ${env_var}, which is not set"
            )
        _check_sendable(deployment, f"${env_var} (header {name!r})", name, value)
        headers[name] = value.get_secret_value()
    key = read_secret(deployment.api_key_env)
    if key is not None:
        _check_sendable(deployment, f"${deployment.api_key_env}", "Authorization", key)
        headers["Authorization"] = f"Bearer {key.get_secret_value()}"
    basic = deployment.basic_auth_header()
    # as httpx did with a URL's userinfo: the endpoint's own credentials go to its origin only
    # (a metrics_url on another host gets the deployment's headers and key, never these)
    if basic is not None and (url is None or _origin(url) == _origin(str(deployment.endpoint))):
        headers["Authorization"] = basic
    return headers


def _check_sendable(deployment: Deployment, source: str, name: str, value: SecretStr) -> None:
    """A secret from the environment that no HTTP header can carry is an error naming where it
    came from, never its value."""
    if header_problem(name, value.get_secret_value()) is not None:
        raise MissingSecret(
            f"{deployment.name}: {source} holds what no HTTP header can carry: printable ASCII "
            "only, no line breaks (the value is not shown)"
        )


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


async def _one_wave(
    client: StreamClients | ClientPool,
    deployment: Deployment,
    workload: str,
    plan: SweepPlan,
    run_id: str,
    item: WavePlanItem,
    attempt: int,
    headers: dict[str, str],
    before_wave: Callable[[WaveRecord], Awaitable[None]] | None,
    after_wave: Callable[[WaveRecord], Awaitable[None]] | None,
) -> WaveRecord:
    # a re-measured wave gets fresh prompts: the spoiled one may have warmed a prefix cache
    tag = f"{run_id[-6:]}-{deployment.name}-c{item.concurrency}-t{item.trial}"
    if item.probe:
        tag += f"-{item.probe}"
    wave_tag = tag if attempt == 1 else f"{tag}-a{attempt}"
    sessions = (
        build_sessions(plan.sessions, item.concurrency, wave_tag) if workload == "agent" else []
    )
    specs = (
        []
        if sessions
        else build_streams(
            workload,
            item.concurrency,
            wave_tag=wave_tag,
            max_tokens=item.max_tokens or plan.max_tokens,
            length_factor=item.length_factor,
            min_tokens=item.min_tokens,
        )
    )
    wave = WaveRecord(
        wave_id=wave_id(
            run_id, deployment.name, workload, item.concurrency, item.trial, attempt, item.probe
        ),
        run_id=run_id,
        deployment=deployment.name,
        model=deployment.model,
        endpoint=str(deployment.endpoint),
        workload=workload,
        concurrency=item.concurrency,
        trial=item.trial,
        started_at_ns=time.time_ns(),
        anchor_perf_ns=time.perf_counter_ns(),
        attempt=attempt,
        probe=item.probe,
        method=item.method,
        search_step=item.search_step,
        # an agent wave's sessions always have the plan's shape (a search's shortened trial
        # or longer sustain wave shapes only single-prompt streams)
        length_factor=1.0 if sessions else item.length_factor,
    )
    if before_wave is not None:
        await before_wave(wave)
    target = wave_target(deployment, headers)
    if sessions:
        if not isinstance(client, StreamClients):
            raise TypeError("agent sessions run on the sweep's own loop (client_process_count)")
        if plan.sessions.reset_cache:
            wave.cache_reset = await reset_prefix_cache(deployment, headers)
        await run_session_wave(client, wave=wave, target=target, sessions=sessions)
    elif isinstance(client, ClientPool):
        await client.run_wave(wave=wave, target=target, specs=specs)
    else:
        await run_wave(client, wave=wave, target=target, specs=specs)
    if after_wave is not None:
        await after_wave(wave)
    return wave


class WaveRunner:
    """Runs one planned wave with the sweep's client: re-measures a wave the client spoiled
    (as ``client_rule`` judges; without one, no wave is measured again), hands every attempt to
    the callbacks, and stops the sweep when the endpoint is gone. The grid and the search
    (loadgen/search.py) both measure through it."""

    def __init__(
        self,
        client: StreamClients | ClientPool,
        deployment: Deployment,
        workload: str,
        plan: SweepPlan,
        run_id: str,
        *,
        on_wave: WaveCallback | None,
        progress: ProgressCallback | None,
        before_wave: Callable[[WaveRecord], Awaitable[None]] | None,
        after_wave: Callable[[WaveRecord], Awaitable[None]] | None,
        planned: int,
        client_rule: ClientRule | None = None,
    ) -> None:
        self.client = client
        self.deployment = deployment
        self.workload = workload
        self.plan = plan
        self.run_id = run_id
        self.on_wave = on_wave
        self.progress = progress
        self.before_wave = before_wave
        self.after_wave = after_wave
        self.planned = planned
        self.client_rule = client_rule
        self.headers = request_headers(deployment)
        self.waves: list[WaveRecord] = []
        self.n_items = 0

    async def measure(
        self, item: WavePlanItem, decide: Callable[[WaveRecord], Awaitable[None]] | None = None
    ) -> WaveRecord:
        """The wave of record for ``item`` (its last attempt). ``decide`` runs on that wave
        before it is handed on, so a decision made from it is staged with it."""
        self.n_items += 1
        for attempt in range(1, self.plan.max_remeasures + 2):
            wave = await _one_wave(
                self.client,
                self.deployment,
                self.workload,
                self.plan,
                self.run_id,
                item,
                attempt,
                self.headers,
                self.before_wave,
                self.after_wave,
            )
            spoiled = None
            if self.client_rule is not None and worth_remeasuring(wave):
                # off the loop: a parallel deployment's wave may be timing on it
                spoiled = await asyncio.to_thread(self.client_rule, wave)
            wave.client_spoiled_live = spoiled
            retry = spoiled is not None and attempt <= self.plan.max_remeasures
            if retry:
                wave.superseded_reason = f"re-measured (attempt {attempt + 1}): {spoiled}"
            elif decide is not None:
                await decide(wave)
            self.waves.append(wave)
            if self.on_wave is not None:
                res = self.on_wave(wave)
                if inspect.isawaitable(res):
                    await res
            if self.progress is not None:
                self.progress(wave, self.n_items, max(self.planned, self.n_items))
            if endpoint_down(wave):
                raise EndpointDown(
                    f"{self.deployment.name} stopped answering at {self.workload} "
                    f"c={item.concurrency} trial {item.trial}: {wave.requests[0].error}"
                )
            if not retry:
                return wave
        raise AssertionError("unreachable: the last attempt never retries")


async def run_sweep(
    deployment: Deployment,
    workload: str,
    plan: SweepPlan,
    run_id: str,
    *,
    on_wave: WaveCallback | None = None,
    progress: ProgressCallback | None = None,
    before_wave: Callable[[WaveRecord], Awaitable[None]] | None = None,
    after_wave: Callable[[WaveRecord], Awaitable[None]] | None = None,
    judge: Judge | None = None,
    client_rule: ClientRule | None = None,
) -> list[WaveRecord]:
    """Sweep the plan's levels as a grid, or search them when the plan says so (then
    ``judge`` decides each level; see loadgen/search.py). ``client_rule``: dbt's client-spoiled
    rule, compiled (see :class:`WaveRunner`)."""
    n_procs = client_process_count(plan, workload)
    client_cm: contextlib.AbstractAsyncContextManager[StreamClients | ClientPool] = (
        ClientPool(deployment, n_procs, plan.min_streams_per_process)
        if n_procs > 0
        else StreamClients(deployment)
    )
    async with client_cm as client:
        runner = WaveRunner(
            client,
            deployment,
            workload,
            plan,
            run_id,
            on_wave=on_wave,
            progress=progress,
            before_wave=before_wave,
            after_wave=after_wave,
            planned=planned_wave_count(plan),
            client_rule=client_rule,
        )
        if plan.search is not None:
            if judge is None:
                raise ValueError("a search needs a judge (sparkcap.transform.live_judge)")
            await run_search(runner, plan.search, judge)
        else:
            for item in plan_waves(plan):
                await runner.measure(item)
    return runner.waves


def client_process_count(plan: SweepPlan, workload: str = "code") -> int:
    """Worker processes a sweep starts (0: every stream runs on the sweep's own loop).

    Only as many as its largest wave can use: a wave is dealt over at most one process per
    ``min_streams_per_process`` streams (procs.py), so more would be interpreters that start,
    hold connections and never run a stream.
    """
    if workload == "agent":
        return 0  # a session's turns follow each other on one loop (sessions.py)
    wanted = plan.client_processes or available_cores()
    if wanted <= 1:
        return 0
    largest = plan.search.max_level if plan.search is not None else max(plan.levels)
    return max(1, min(wanted, largest // plan.min_streams_per_process))
