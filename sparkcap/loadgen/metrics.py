"""Prometheus-text scrapes of the server before and after each wave.

llama.cpp (``--metrics``), vLLM and SGLang expose counters such as speculative draft and
accept totals; their difference across a wave is the wave's acceptance rate. A scrape uses the
deployment's own TLS settings and headers (a server that needs a key for chat usually needs it
for ``/metrics`` too). Every failed scrape is recorded on its wave (``metrics_error``), so a
report can say whose server metrics are missing and why instead of going quiet; only a server
that answers 404 (no metrics endpoint at all) is not asked again within the sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable

from prometheus_client.parser import text_string_to_metric_families

from sparkcap.config import Deployment
from sparkcap.loadgen.connections import FetchFailed, fetch_bounded, make_client
from sparkcap.loadgen.records import WaveRecord
from sparkcap.loadgen.sweep import request_headers

MAX_METRICS_BYTES = 4 << 20
# a gauge sample each second: a 50-token/s stream of 1000 tokens runs ~20-60 s, and a queue
# or a full KV cache lasts seconds; 600 samples cover a ten-minute wave
DURING_INTERVAL_S = 1.0
MAX_DURING_SCRAPES = 600


class MetricsParseError(ValueError):
    """The body is not Prometheus text exposition format."""


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Samples as (name, labels, value), parsed by the maintained Prometheus client: label
    values may hold ``}``, ``,`` or escaped quotes, which a regular expression gets wrong."""
    try:
        return [
            (s.name, dict(s.labels), float(s.value))
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsParseError(f"not Prometheus text: {exc}"[:200]) from None


def parse_gauges(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Only the gauge samples: what a scrape during a wave is for (waiting and running
    requests, KV-cache use), without a copy of every histogram bucket each second."""
    try:
        return [
            (s.name, dict(s.labels), float(s.value))
            for family in text_string_to_metric_families(text)
            if family.type == "gauge"
            for s in family.samples
        ]
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsParseError(f"not Prometheus text: {exc}"[:200]) from None


def labels_text(labels: dict[str, str]) -> str:
    """A stable text form (sorted JSON) for the ``labels`` column."""
    return json.dumps(labels, sort_keys=True, separators=(",", ":")) if labels else ""


def metrics_url(dep: Deployment) -> str:
    if dep.metrics_url is not None:
        return str(dep.metrics_url)
    return dep.server_url("metrics")  # at the server's root, the endpoint's query string kept


WaveHook = Callable[[WaveRecord], Awaitable[None]]


def scrape_into(
    dep: Deployment,
    timeout_s: float = 5.0,
    during_interval_s: float | None = DURING_INTERVAL_S,
) -> tuple[WaveHook, WaveHook]:
    """Hooks that scrape before and after each wave, and its gauges every
    ``during_interval_s`` while it runs (None: never); ``timeout_s`` bounds a whole scrape
    (connect, headers and body), so a wave waits at most that long on each side of it.

    Gauges (waiting and running requests, KV-cache use) read ~0 before and after a wave: only
    samples taken while it runs can show a queue or a full cache. The samples run in a task
    of their own, so a slow ``/metrics`` delays no stream; a wave keeps at most
    ``MAX_DURING_SCRAPES`` of them.
    """
    url = metrics_url(dep)
    absent: str | None = None  # set once the server has said it has no metrics endpoint
    running: dict[str, asyncio.Task[None]] = {}

    def fail(wave: WaveRecord, phase: str, why: str) -> None:
        msg = f"{phase}: {why}"
        wave.metrics_error = msg if wave.metrics_error is None else f"{wave.metrics_error}; {msg}"

    async def scrape(wave: WaveRecord, phase: str) -> bool:
        nonlocal absent
        if absent is not None:
            fail(wave, phase, absent)
            return False
        headers = {k: v for k, v in request_headers(dep, url).items() if k != "Accept"}
        try:
            async with make_client(dep, 1) as c:
                status, body = await fetch_bounded(c, url, headers, timeout_s, MAX_METRICS_BYTES)
        except FetchFailed as exc:
            fail(wave, phase, str(exc))
            return False
        if status == 404:
            absent = f"no metrics endpoint ({url} answered 404)"
            fail(wave, phase, absent)
            return False
        if status != 200:
            fail(wave, phase, f"HTTP {status} from {url}")
            return False
        parse = parse_gauges if phase == "during" else parse_prometheus
        try:
            samples = parse(body.decode("utf-8", errors="replace"))
        except MetricsParseError as exc:
            fail(wave, phase, str(exc))
            return False
        wave.server_metrics.extend((phase, n, lb, v) for n, lb, v in samples)
        return True

    async def sample_during(wave: WaveRecord, interval_s: float) -> None:
        for _ in range(MAX_DURING_SCRAPES):
            await asyncio.sleep(interval_s)
            if not await scrape(wave, "during"):
                return  # one failure is said once; the wave's other samples stand

    async def before(wave: WaveRecord) -> None:
        await scrape(wave, "before")
        if during_interval_s is not None and absent is None:
            running[wave.wave_id] = asyncio.create_task(sample_during(wave, during_interval_s))

    async def after(wave: WaveRecord) -> None:
        task = running.pop(wave.wave_id, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await scrape(wave, "after")

    return before, after
