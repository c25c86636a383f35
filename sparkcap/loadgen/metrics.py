"""Prometheus-text scrapes of the server before and after each wave.

llama.cpp (``--metrics``), vLLM and SGLang expose counters such as speculative draft and
accept totals; their difference across a wave is the wave's acceptance rate. A scrape uses the
deployment's own TLS settings and headers (a server that needs a key for chat usually needs it
for ``/metrics`` too). Every failed scrape is recorded on its wave (``metrics_error``), so a
report can say whose server metrics are missing and why instead of going quiet. Two kinds of
page are not asked again within the sweep: one that answers 404 (no metrics endpoint at all),
and one that missed the scrape deadline twice running (a page that trickles would otherwise add
its deadline to each side of every wave, re-measures included).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sparkcap.config.deployment import Deployment
from sparkcap.loadgen.connections import (
    TIMEOUTS_BEFORE_GIVING_UP,
    FetchFailed,
    FetchTimedOut,
    fetch_bounded,
    make_client,
)
from sparkcap.loadgen.records import WaveRecord
from sparkcap.loadgen.sweep import request_headers

MAX_METRICS_BYTES = 4 << 20
# a gauge sample each second: a 50-token/s stream of 1000 tokens runs ~20-60 s, and a queue
# or a full KV cache lasts seconds; 600 samples cover a ten-minute wave
DURING_INTERVAL_S = 1.0
MAX_DURING_SCRAPES = 600
MAX_DURING_BYTES = 64 << 20  # pages held until the wave ends
# samples kept per wave: a page of 4 MiB of gauges each second stored 2.15 M rows (2.2 GB) for
# an 8 s wave. Real engines' pages hold a few thousand series; the bytes cap alone bounds
# what is fetched, these bound what is parsed and kept. Before and after each have their own
# allowance, so samples during a wave never crowd out the counters they pair
MAX_SNAPSHOT_SAMPLES = 50_000
MAX_DURING_SAMPLES = 200_000


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
    samples taken while it runs can show a queue or a full cache. The samples share the
    wave's event loop with the streams it times, so while the wave runs a sample costs only
    I/O: one client made before the wave starts (making one loads the TLS trust store, ~20 ms
    of a blocked loop), and the pages kept as bytes, parsed after the wave ends. A wave keeps
    at most ``MAX_DURING_SCRAPES`` samples and ``MAX_DURING_BYTES`` of them.
    """
    url = metrics_url(dep)
    # set once the page is not to be asked again: the server said it has none, or it missed
    # the deadline TIMEOUTS_BEFORE_GIVING_UP times running
    absent: str | None = None
    missed = 0  # scrapes running that got no complete answer within the deadline
    running: dict[str, tuple[asyncio.Task[None], httpx.AsyncClient, list[bytes]]] = {}

    def fail(wave: WaveRecord, phase: str, why: str) -> None:
        msg = f"{phase}: {why}"
        wave.metrics_error = msg if wave.metrics_error is None else f"{wave.metrics_error}; {msg}"

    def headers() -> dict[str, str]:
        return {k: v for k, v in request_headers(dep, url).items() if k != "Accept"}

    def page_of(wave: WaveRecord, phase: str, status: int, body: bytes) -> bytes | None:
        nonlocal absent
        if status == 404:
            absent = f"no metrics endpoint ({url} answered 404)"
            fail(wave, phase, absent)
            return None
        if status != 200:
            fail(wave, phase, f"HTTP {status} from {url}")
            return None
        return body

    def keep(wave: WaveRecord, phase: str, body: bytes, room: int) -> int:
        """Parse one page into the wave, at most ``room`` samples; returns how many."""
        parse = parse_gauges if phase == "during" else parse_prometheus
        try:
            samples = parse(body.decode("utf-8", errors="replace"))
        except MetricsParseError as exc:
            fail(wave, phase, str(exc))
            return 0
        if len(samples) > room:
            cap = MAX_DURING_SAMPLES if phase == "during" else MAX_SNAPSHOT_SAMPLES
            fail(wave, phase, f"samples stopped at {cap} (the page holds {len(samples)})")
            samples = samples[:room]
        wave.server_metrics.extend((phase, n, lb, v) for n, lb, v in samples)
        return len(samples)

    async def scrape(wave: WaveRecord, phase: str) -> None:
        nonlocal absent, missed
        if absent is not None:
            fail(wave, phase, absent)
            return
        try:
            async with make_client(dep, 1) as c:
                status, body = await fetch_bounded(c, url, headers(), timeout_s, MAX_METRICS_BYTES)
        except FetchTimedOut as exc:
            fail(wave, phase, str(exc))
            missed += 1
            if missed >= TIMEOUTS_BEFORE_GIVING_UP:
                absent = (
                    f"not asked again in this sweep: {missed} scrapes running got no complete "
                    f"answer within {timeout_s:g} s from {url}"
                )
            return
        except FetchFailed as exc:
            fail(wave, phase, str(exc))
            missed = 0
            return
        missed = 0
        page = page_of(wave, phase, status, body)
        if page is not None:
            keep(wave, phase, page, MAX_SNAPSHOT_SAMPLES)

    async def sample_during(
        wave: WaveRecord, client: httpx.AsyncClient, pages: list[bytes], interval_s: float
    ) -> None:
        kept = 0
        sent = headers()
        for _ in range(MAX_DURING_SCRAPES):
            await asyncio.sleep(interval_s)
            try:
                status, body = await fetch_bounded(client, url, sent, timeout_s, MAX_METRICS_BYTES)
            except FetchFailed as exc:
                fail(wave, "during", str(exc))
                return  # one failure is said once; the wave's other samples stand
            page = page_of(wave, "during", status, body)
            if page is None:
                return
            kept += len(page)
            if kept > MAX_DURING_BYTES:
                fail(wave, "during", f"samples stopped at {MAX_DURING_BYTES >> 20} MiB of pages")
                return
            pages.append(page)

    async def before(wave: WaveRecord) -> None:
        await scrape(wave, "before")
        if during_interval_s is not None and absent is None:
            client = make_client(dep, 1)
            pages: list[bytes] = []
            task = asyncio.create_task(sample_during(wave, client, pages, during_interval_s))
            running[wave.wave_id] = (task, client, pages)

    async def after(wave: WaveRecord) -> None:
        held = running.pop(wave.wave_id, None)
        if held is not None:
            task, client, pages = held
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await client.aclose()
            room = MAX_DURING_SAMPLES
            for page in pages:
                if room <= 0:
                    break
                room -= keep(wave, "during", page, room)
        await scrape(wave, "after")

    return before, after
