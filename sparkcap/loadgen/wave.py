"""Synchronized waves and the client-health evidence that makes a wave trustworthy.

A wave prepares every stream's request first, then releases them together from a barrier and
waits for all of them to end. While it runs, a sampler measures how late the event loop wakes
up (loop lag) and how much CPU the client burns. Those are measurements; whether they spoil a
wave is judged in dbt (``int_trials``), from the *error they can cause in the rates*: a 50 ms
stall is 4 % of a 1.3 s stream but 0.1 % of a 50 s one, so no absolute lag limit is right for
both. The wave records the bound that judgement needs (:func:`timing_error_bound`).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import gc
import os
import time
from array import array
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import psutil

from sparkcap.config.deployment import Deployment
from sparkcap.loadgen.client import stream_request
from sparkcap.loadgen.connections import StreamClients
from sparkcap.loadgen.records import ProcessTiming, RequestRecord, Status, WaveRecord
from sparkcap.loadgen.workloads import StreamSpec

LAG_SAMPLE_INTERVAL_S = 0.01


class LoopMonitor:
    """Samples event-loop lag and process CPU between ``start()`` and ``stop()``.

    Each sample keeps the instant the sampler woke (``perf_counter_ns``) beside its lag, so
    a stall can be placed in time: only a stall near a stream's first or last token moves its
    decode rate; one in the middle of a stream delays chunks but not the rate.
    """

    def __init__(self, interval_s: float = LAG_SAMPLE_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.woke_ns: array[int] = array("q")
        self.lag_ns: array[int] = array("q")
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
            now = time.perf_counter_ns()
            self.woke_ns.append(now)
            self.lag_ns.append(max(now - t - interval_ns, 0))

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
    def lags_ms(self) -> list[float]:
        return [x / 1e6 for x in self.lag_ns]

    @property
    def lag_p99_ms(self) -> float | None:
        if not self.lag_ns:
            return None
        xs = sorted(self.lag_ns)
        return xs[min(len(xs) - 1, int(0.99 * (len(xs) - 1) + 0.5))] / 1e6

    @property
    def lag_max_ms(self) -> float | None:
        return max(self.lag_ns) / 1e6 if self.lag_ns else None

    def lateness_ns(self, t_perf_ns: int) -> int:
        """How late a timestamp taken at ``t_perf_ns`` may be: the largest lag the sampler saw
        waking within one sampling interval of it (0 when the loop was on time there)."""
        span = int(self.interval_s * 1e9)
        lo = bisect.bisect_left(self.woke_ns, t_perf_ns - span)
        hi = bisect.bisect_right(self.woke_ns, t_perf_ns + span)
        return max(self.lag_ns[lo:hi], default=0)


def timing_error_bound(
    requests: Sequence[RequestRecord], monitor: LoopMonitor, anchor_ns: int
) -> float | None:
    """The largest relative error loop stalls can have put into any ``ok`` stream's rate.

    A stream's rate is (n − 1) / (last − first); if the first timestamp is late by ``a`` and
    the last by ``b`` the interval is off by at most ``a + b``, so the rate by at most
    ``(a + b) / (last − first)``. The trial value is a median over streams, so it is off by no
    more than the largest per-stream bound. A stamp that is the kernel's own arrival time of
    its event (``*_token_exact``) is late by nothing the loop did. ``None`` when no stream
    decoded.
    """
    worst: float | None = None
    for r in requests:
        bound = stream_timing_error(r, monitor, anchor_ns)
        if bound is not None:
            worst = bound if worst is None else max(worst, bound)
    return worst


def stream_timing_error(r: RequestRecord, monitor: LoopMonitor, anchor_ns: int) -> float | None:
    """One ``ok`` stream's bound (see :func:`timing_error_bound`); ``None`` when it did not
    decode over a span."""
    if r.status != Status.OK or r.first_token_ns is None or r.last_token_ns is None:
        return None
    span = r.last_token_ns - r.first_token_ns
    if span <= 0:
        return None
    late = (0 if r.first_token_exact else monitor.lateness_ns(anchor_ns + r.first_token_ns)) + (
        0 if r.last_token_exact else monitor.lateness_ns(anchor_ns + r.last_token_ns)
    )
    return late / span


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


def token_ceiling(body: dict[str, Any]) -> int | None:
    """The most completion tokens a request body allows, or ``None`` where it names no integer
    bound (``max_completion_tokens`` is OpenAI's newer name; a server honours either)."""
    bounds = [
        v
        for k in ("max_tokens", "max_completion_tokens")
        if type(v := body.get(k)) is int and v > 0  # not ``true``
    ]
    return max(bounds) if bounds else None


def required_tokens_for(spec: StreamSpec, extra_body: dict[str, Any]) -> int:
    """A stream must deliver the requested length; ``min_tokens`` may lower that bar."""
    mt = extra_body.get("min_tokens")
    if type(mt) is int and 0 < mt < spec.max_tokens:  # not ``true``
        return mt
    return spec.max_tokens


def new_request(
    request_id: str, stream_index: int, spec: StreamSpec, extra_body: dict[str, Any]
) -> RequestRecord:
    """The record of one stream before it is sent: what was asked and what it must deliver."""
    return RequestRecord(
        request_id=request_id,
        stream_index=stream_index,
        prompt_id=spec.prompt_id,
        requested_tokens=spec.max_tokens,
        required_tokens=required_tokens_for(spec, extra_body),
        temperature=spec.temperature,
        full_tokens=spec.full_tokens,
    )


@dataclass(frozen=True, slots=True)
class WaveTarget:
    """Where a wave's requests go and what each carries besides its prompt; every way of
    running a wave (this process's loop, several processes, agent sessions) takes one."""

    url: str  # the deployment's chat completions URL (its credentials are moved to headers)
    # its request headers, secrets among them: never stored, and left out of the repr, so a
    # log line or a traceback that prints a target prints no secret
    headers: dict[str, str] = field(repr=False)
    extra_body: dict[str, Any]  # merged into each request's body
    continuous_usage: bool  # ask for per-chunk usage
    total_timeout_s: float  # one request's deadline

    def headers_for(self, request_id: str) -> dict[str, str]:
        """One request's headers: X-Request-Id lets a server's own logs be joined to
        sparkcap's rows (vLLM honours it)."""
        return {**self.headers, "Content-Type": "application/json", "X-Request-Id": request_id}


def wave_target(deployment: Deployment, headers: dict[str, str]) -> WaveTarget:
    """``deployment``'s target, with the request headers read for it (``request_headers``)."""
    return WaveTarget(
        url=deployment.chat_url,
        headers=headers,
        extra_body=deployment.extra_body,
        continuous_usage=deployment.continuous_usage,
        total_timeout_s=deployment.timeouts.total_s,
    )


def prepare_streams(
    wave: WaveRecord, specs: Sequence[StreamSpec], target: WaveTarget
) -> tuple[list[bytes], list[dict[str, str]]]:
    """Create the wave's request records and every request's encoded body and headers.

    Everything a request needs is built before the release: at the instant of release each
    stream only writes bytes, so the release is as tight as the loop can make it.
    """
    extra_body = target.extra_body
    wave.requests = [
        new_request(f"{wave.wave_id}/s{i:03d}", i, s, extra_body) for i, s in enumerate(specs)
    ]
    built = [build_body(s, wave.model, target.continuous_usage, extra_body) for s in specs]
    for rec, body in zip(wave.requests, built, strict=True):
        rec.token_ceiling = token_ceiling(body)
    bodies = [orjson.dumps(body) for body in built]
    return bodies, [target.headers_for(r.request_id) for r in wave.requests]


ReleaseGate = Callable[[], Awaitable[int]]
FollowUp = Callable[[int], Awaitable[None]]
SPIN_BEFORE_RELEASE_NS = 2_000_000  # sleep until 2 ms before the release, then spin


async def release_streams(
    clients: StreamClients,
    *,
    url: str,
    bodies: Sequence[bytes],
    headers: Sequence[dict[str, str]],
    records: Sequence[RequestRecord],
    anchor_perf_ns: int,
    total_timeout_s: float,
    process_index: int = 0,
    release_gate: ReleaseGate | None = None,
    follow_up: FollowUp | None = None,
) -> ProcessTiming:
    """Run ``records``' streams on this loop, all released at one instant, and time the loop.

    Every stream is sent but for its last byte and parked at a gate first (client.py).
    ``release_gate`` (several processes share one wave) is awaited once all are parked and
    returns the ``perf_counter_ns`` instant of release, which every process of the wave was
    given; without it the release is now. ``follow_up(i)`` runs after stream ``i`` ends,
    inside the timed wave (an agent session's later turns): whatever records it appends to
    ``records`` are timed and bounded like the released ones.
    """
    gate = asyncio.Event()
    answered_early: set[int] = set()
    parked = 0
    all_parked = asyncio.Event()
    n_released = len(records)

    def on_parked() -> None:
        nonlocal parked
        parked += 1
        if parked == n_released:
            all_parked.set()

    async def one(i: int) -> None:
        rec = records[i]
        slot = rec.stream_index
        await _released(i, rec, slot)
        if follow_up is not None:
            await follow_up(i)

    async def _released(i: int, rec: RequestRecord, slot: int) -> None:
        await stream_request(
            clients[slot],
            url,
            bodies[i],
            headers[i],
            rec,
            anchor_perf_ns,
            total_timeout_s,
            release=gate,
            on_parked=on_parked,
            answered_early=lambda: slot in answered_early,
            trace=clients.trace(slot),
        )

    monitor = LoopMonitor()
    tasks = [asyncio.create_task(one(i)) for i in range(n_released)]
    if records:
        await all_parked.wait()
    _collector_off()
    try:
        release_ns = await release_gate() if release_gate is not None else time.perf_counter_ns()
        monitor.start()
        wait_ns = release_ns - time.perf_counter_ns() - SPIN_BEFORE_RELEASE_NS
        if wait_ns > 0:
            await asyncio.sleep(wait_ns / 1e9)
        while time.perf_counter_ns() < release_ns:
            pass  # the last 2 ms: a timer would wake up to a millisecond late
        answered_early.update(clients.answered_early(r.stream_index for r in records[:n_released]))
        released = time.perf_counter_ns()
        gate.set()
        await asyncio.gather(*tasks)
        ended = time.perf_counter_ns()
        await monitor.stop()
    finally:
        _collector_back()
    return ProcessTiming(
        process_index=process_index,
        pid=os.getpid(),
        n_streams=n_released,
        released_ns=released - anchor_perf_ns,
        ended_ns=ended - anchor_perf_ns,
        loop_lag_p99_ms=monitor.lag_p99_ms,
        loop_lag_max_ms=monitor.lag_max_ms,
        cpu_pct=monitor.cpu_pct,
        timing_error_bound=timing_error_bound(records, monitor, anchor_perf_ns),
    )


# A full collection over a process's objects stops its loop for tens of milliseconds (hundreds
# in a process that has loaded dbt and Prefect): the collector is off while any wave of this
# process is being timed. Counted, because sweeps of several deployments share a process.
_timed_waves = 0
_collector_was_on = False


def _collector_off() -> None:
    global _timed_waves, _collector_was_on
    if _timed_waves == 0:
        _collector_was_on = gc.isenabled()
        gc.disable()
    _timed_waves += 1


def _collector_back() -> None:
    global _timed_waves
    _timed_waves -= 1
    if _timed_waves == 0 and _collector_was_on:
        gc.enable()


def settle_wave(wave: WaveRecord, timings: Sequence[ProcessTiming]) -> WaveRecord:
    """Wave-level measurements from its streams and from every process that ran them.

    The loop figures are the worst process's (a stall in any process can spoil its streams);
    the timing bound is a max over streams, so the max over processes is the wave's bound.
    """
    wave.client_processes = list(timings)
    if timings:
        wave.duration_s = (
            max(t.ended_ns for t in timings) - min(t.released_ns for t in timings)
        ) / 1e9
    # the release's raggedness: an agent session's later turns are sent after think time
    sent = [r.sent_ns for r in wave.requests if r.sent_ns is not None and not r.turn_index]
    wave.start_skew_ms = (max(sent) - min(sent)) / 1e6 if sent else None
    wave.loop_lag_p99_ms = _max_or_none(t.loop_lag_p99_ms for t in timings)
    wave.loop_lag_max_ms = _max_or_none(t.loop_lag_max_ms for t in timings)
    wave.client_cpu_pct = _max_or_none(t.cpu_pct for t in timings)
    wave.timing_error_bound = _max_or_none(t.timing_error_bound for t in timings)
    return wave


def _max_or_none(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


async def run_wave(
    clients: StreamClients, *, wave: WaveRecord, target: WaveTarget, specs: Sequence[StreamSpec]
) -> WaveRecord:
    """Release ``specs`` together against ``target`` from this process's loop; record the
    wave."""
    bodies, per_request = prepare_streams(wave, specs, target)
    timing = await release_streams(
        clients,
        url=target.url,
        bodies=bodies,
        headers=per_request,
        records=wave.requests,
        anchor_perf_ns=wave.anchor_perf_ns,
        total_timeout_s=target.total_timeout_s,
    )
    return settle_wave(wave, [timing])
