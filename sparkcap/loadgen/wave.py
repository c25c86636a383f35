"""Synchronized waves and the client-health evidence that makes a wave trustworthy.

A wave prepares every stream's request first, then releases them together from a barrier and
waits for all of them to end. While it runs, a sampler measures how late the event loop wakes
up (loop lag) and how much CPU the client burns: if the client itself is the bottleneck, the
timestamps it takes are late and the wave is flagged ``client_saturated`` rather than trusted.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Any

import httpx
import psutil

from sparkcap.loadgen.client import stream_request
from sparkcap.loadgen.records import RequestRecord, WaveRecord
from sparkcap.loadgen.workloads import StreamSpec

# Documented saturation thresholds (README, "Client saturation").
LOOP_LAG_P99_LIMIT_MS = 50.0
CLIENT_CPU_LIMIT_PCT = 85.0  # of one core: the event loop is single-threaded
START_SKEW_LIMIT_MS = 100.0
LAG_SAMPLE_INTERVAL_S = 0.01


class LoopMonitor:
    """Samples event-loop lag and process CPU between ``start()`` and ``stop()``."""

    def __init__(self, interval_s: float = LAG_SAMPLE_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.lags_ms: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._proc = psutil.Process()
        self._cpu0 = 0.0
        self._t0 = 0.0
        self.cpu_pct: float | None = None

    async def _run(self) -> None:
        interval_ns = int(self.interval_s * 1e9)
        while True:
            t = time.perf_counter_ns()
            await asyncio.sleep(self.interval_s)
            late = time.perf_counter_ns() - t - interval_ns
            self.lags_ms.append(max(late, 0) / 1e6)

    def start(self) -> None:
        ct = self._proc.cpu_times()
        self._cpu0 = ct.user + ct.system
        self._t0 = time.perf_counter()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        ct = self._proc.cpu_times()
        wall = time.perf_counter() - self._t0
        if wall > 0:
            self.cpu_pct = 100.0 * (ct.user + ct.system - self._cpu0) / wall

    @property
    def lag_p99_ms(self) -> float | None:
        if not self.lags_ms:
            return None
        xs = sorted(self.lags_ms)
        return xs[min(len(xs) - 1, int(0.99 * (len(xs) - 1) + 0.5))]


def effective_concurrency(requests: Sequence[RequestRecord]) -> float | None:
    """Time-weighted number of streams decoding at once, over the wave's decode span.

    Each stream counts as decoding from its first to its last content chunk. If a server runs
    fewer slots than requested, streams decode one after another and this number falls below
    the requested level even when every stream eventually succeeds.
    """
    spans = [
        (r.first_token_ns, r.last_token_ns)
        for r in requests
        if r.first_token_ns is not None
        and r.last_token_ns is not None
        and r.last_token_ns > r.first_token_ns
    ]
    if not spans:
        return None
    start = min(s for s, _ in spans)
    end = max(e for _, e in spans)
    if end <= start:
        return None
    busy = sum(e - s for s, e in spans)
    return busy / (end - start)


def peak_concurrency(requests: Sequence[RequestRecord]) -> int:
    """Most streams decoding at one instant (first to last content chunk, inclusive).

    If it is below the number of streams that decoded, some stream only started after another
    had finished: the server queued it (fewer slots than streams), whatever the rates say.
    """
    events: list[tuple[int, int]] = []
    for r in requests:
        if r.first_token_ns is not None and r.last_token_ns is not None:
            events.append((r.first_token_ns, 1))
            events.append((r.last_token_ns, 0))
    # a stream that starts at the instant another ends did not overlap it: ends sort first
    events.sort(key=lambda e: (e[0], e[1]))
    cur = peak = 0
    for _, is_start in events:
        cur += 1 if is_start else -1
        peak = max(peak, cur)
    return peak


def build_body(
    spec: StreamSpec, model: str, continuous_usage: bool, extra_body: dict[str, Any]
) -> dict[str, Any]:
    stream_options: dict[str, Any] = {"include_usage": True}
    if continuous_usage:
        stream_options["continuous_usage_stats"] = True
    body: dict[str, Any] = {
        "model": model,
        "messages": list(spec.messages),
        "stream": True,
        "max_tokens": spec.max_tokens,
        "temperature": spec.temperature,
        "stream_options": stream_options,
    }
    for k, v in extra_body.items():
        if k == "stream_options" and isinstance(v, dict):
            body["stream_options"] = {**stream_options, **v}
        else:
            body[k] = v
    return body


def required_tokens_for(spec: StreamSpec, extra_body: dict[str, Any]) -> int:
    """A stream must deliver the requested length; ``min_tokens`` may lower that bar."""
    mt = extra_body.get("min_tokens")
    if isinstance(mt, int) and 0 < mt < spec.max_tokens:
        return mt
    return spec.max_tokens


async def run_wave(
    client: httpx.AsyncClient,
    *,
    wave: WaveRecord,
    url: str,
    specs: Sequence[StreamSpec],
    headers: dict[str, str],
    extra_body: dict[str, Any],
    continuous_usage: bool,
    total_timeout_s: float,
) -> WaveRecord:
    """Release ``specs`` together against ``url`` and record the wave in place."""
    bodies = [build_body(s, wave.model, continuous_usage, extra_body) for s in specs]
    wave.requests = [
        RequestRecord(
            request_id=f"{wave.wave_id}/s{i:03d}",
            stream_index=i,
            prompt_id=s.prompt_id,
            requested_tokens=s.max_tokens,
            required_tokens=required_tokens_for(s, extra_body),
            temperature=s.temperature,
        )
        for i, s in enumerate(specs)
    ]
    # X-Request-Id lets a server's own logs be joined to sparkcap's rows (vLLM honours it)
    per_request_headers = [{**headers, "X-Request-Id": r.request_id} for r in wave.requests]
    gate = asyncio.Event()
    ready = 0
    all_ready = asyncio.Event()

    async def one(i: int) -> None:
        nonlocal ready
        ready += 1
        if ready == len(specs):
            all_ready.set()
        await gate.wait()
        await stream_request(
            client,
            url,
            bodies[i],
            per_request_headers[i],
            wave.requests[i],
            wave.anchor_perf_ns,
            total_timeout_s,
        )

    monitor = LoopMonitor()
    tasks = [asyncio.create_task(one(i)) for i in range(len(specs))]
    await all_ready.wait()
    monitor.start()
    t0 = time.perf_counter_ns()
    gate.set()
    await asyncio.gather(*tasks)
    wave.duration_s = (time.perf_counter_ns() - t0) / 1e9
    await monitor.stop()

    sent = [r.sent_ns for r in wave.requests if r.sent_ns is not None]
    wave.start_skew_ms = (max(sent) - min(sent)) / 1e6 if sent else None
    wave.loop_lag_p99_ms = monitor.lag_p99_ms
    wave.client_cpu_pct = monitor.cpu_pct
    reasons = []
    if wave.loop_lag_p99_ms is not None and wave.loop_lag_p99_ms > LOOP_LAG_P99_LIMIT_MS:
        reasons.append(f"loop lag p99 {wave.loop_lag_p99_ms:.0f} ms > {LOOP_LAG_P99_LIMIT_MS:.0f}")
    if wave.client_cpu_pct is not None and wave.client_cpu_pct > CLIENT_CPU_LIMIT_PCT:
        reasons.append(f"client CPU {wave.client_cpu_pct:.0f}% > {CLIENT_CPU_LIMIT_PCT:.0f}%")
    if wave.start_skew_ms is not None and wave.start_skew_ms > START_SKEW_LIMIT_MS:
        reasons.append(f"start skew {wave.start_skew_ms:.0f} ms > {START_SKEW_LIMIT_MS:.0f}")
    wave.saturation_reasons = reasons
    wave.client_saturated = bool(reasons)
    wave.effective_concurrency = effective_concurrency(wave.requests)
    wave.peak_concurrency = peak_concurrency(wave.requests)
    decoded = sum(1 for r in wave.requests if r.first_token_ns is not None)
    if wave.peak_concurrency < decoded:
        wave.queued = True
        wave.queued_reason = (
            f"at most {wave.peak_concurrency} of {decoded} streams decoded at once "
            "(the server queued the rest)"
        )
    return wave
