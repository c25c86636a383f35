"""A sweep: for each concurrency level, one warm-up wave, then N counted trials.

The sweep owns one ``httpx.AsyncClient`` (created here, inside the running loop, so Prefect
tasks never share a client across event loops). It knows nothing about storage: each finished
wave is handed to ``on_wave`` (the warehouse stager in practice), so a crash loses at most the
wave in flight.
"""

from __future__ import annotations

import inspect
import os
import secrets
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx

from sparkcap.config import Deployment, SweepPlan
from sparkcap.loadgen.records import WaveRecord
from sparkcap.loadgen.wave import run_wave
from sparkcap.loadgen.workloads import build_streams
from sparkcap.settings import read_secret

WaveCallback = Callable[[WaveRecord], Awaitable[None] | None]
ProgressCallback = Callable[[WaveRecord, int, int], None]


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


def new_run_id() -> str:
    """Sortable by start time, unique across machines: ``20261129T142500Z-3f9a1c``."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def wave_id(run_id: str, deployment: str, workload: str, concurrency: int, trial: int) -> str:
    return f"{run_id}/{deployment}/{workload}/c{concurrency:04d}/t{trial}"


@dataclass(frozen=True, slots=True)
class WavePlanItem:
    concurrency: int
    trial: int


def plan_waves(plan: SweepPlan) -> list[WavePlanItem]:
    items: list[WavePlanItem] = []
    for level in plan.levels:
        if plan.warmup:
            items.append(WavePlanItem(level, 0))
        items.extend(WavePlanItem(level, t) for t in range(1, plan.trials + 1))
    return items


def make_client(deployment: Deployment, max_streams: int) -> httpx.AsyncClient:
    t = deployment.timeouts
    verify: ssl.SSLContext | bool = True
    if deployment.ca_bundle is not None:
        if not os.path.exists(deployment.ca_bundle):
            raise FileNotFoundError(f"CA bundle not found: {deployment.ca_bundle}")
        verify = ssl.create_default_context(cafile=str(deployment.ca_bundle))
    return httpx.AsyncClient(
        timeout=httpx.Timeout(connect=t.connect_s, read=t.read_idle_s, write=30.0, pool=30.0),
        limits=httpx.Limits(
            max_connections=max_streams + 4,
            max_keepalive_connections=max_streams + 4,
            keepalive_expiry=120.0,
        ),
        verify=verify,
        follow_redirects=False,
        trust_env=False,
    )


def request_headers(deployment: Deployment) -> dict[str, str]:
    headers = {"Accept": "text/event-stream", **deployment.headers}
    key = read_secret(deployment.api_key_env)
    if key is not None:
        headers["Authorization"] = f"Bearer {key.get_secret_value()}"
    return headers


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
) -> list[WaveRecord]:
    items = plan_waves(plan)
    waves: list[WaveRecord] = []
    async with make_client(deployment, max(plan.levels)) as client:
        headers = request_headers(deployment)
        for n, item in enumerate(items, start=1):
            wid = wave_id(run_id, deployment.name, workload, item.concurrency, item.trial)
            specs = build_streams(
                workload,
                item.concurrency,
                wave_tag=f"{run_id[-6:]}-{deployment.name}-c{item.concurrency}-t{item.trial}",
                max_tokens=plan.max_tokens,
            )
            wave = WaveRecord(
                wave_id=wid,
                run_id=run_id,
                deployment=deployment.name,
                model=deployment.model,
                endpoint=str(deployment.endpoint),
                workload=workload,
                concurrency=item.concurrency,
                trial=item.trial,
                started_at_ns=time.time_ns(),
                anchor_perf_ns=time.perf_counter_ns(),
            )
            if before_wave is not None:
                await before_wave(wave)
            await run_wave(
                client,
                wave=wave,
                url=deployment.chat_url,
                specs=specs,
                headers=headers,
                extra_body=deployment.extra_body,
                continuous_usage=deployment.continuous_usage,
                total_timeout_s=deployment.timeouts.total_s,
            )
            if after_wave is not None:
                await after_wave(wave)
            waves.append(wave)
            if on_wave is not None:
                res = on_wave(wave)
                if inspect.isawaitable(res):
                    await res
            if progress is not None:
                progress(wave, n, len(items))
            if endpoint_down(wave):
                raise EndpointDown(
                    f"{deployment.name} stopped answering at {workload} c={item.concurrency} "
                    f"trial {item.trial}: {wave.requests[0].error}"
                )
    return waves
