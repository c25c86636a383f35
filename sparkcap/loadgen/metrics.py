"""Prometheus-text scrapes of the server before and after each wave.

llama.cpp (``--metrics``), vLLM and SGLang expose counters such as speculative draft and
accept totals; their difference across a wave is the wave's acceptance rate. A scrape uses the
deployment's own TLS settings and headers (a server that needs a key for chat usually needs it
for ``/metrics`` too). Every failed scrape is recorded on its wave (``metrics_error``), so a
report can say whose server metrics are missing and why instead of going quiet; only a server
that answers 404 (no metrics endpoint at all) is not asked again within the sweep.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from prometheus_client.parser import text_string_to_metric_families

from sparkcap.config import Deployment
from sparkcap.loadgen.connections import FetchFailed, fetch_bounded, make_client
from sparkcap.loadgen.records import WaveRecord
from sparkcap.loadgen.sweep import request_headers

MAX_METRICS_BYTES = 4 << 20


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


def labels_text(labels: dict[str, str]) -> str:
    """A stable text form (sorted JSON) for the ``labels`` column."""
    return json.dumps(labels, sort_keys=True, separators=(",", ":")) if labels else ""


def metrics_url(dep: Deployment) -> str:
    if dep.metrics_url is not None:
        return str(dep.metrics_url)
    return dep.server_url("metrics")  # at the server's root, the endpoint's query string kept


WaveHook = Callable[[WaveRecord], Awaitable[None]]


def scrape_into(dep: Deployment, timeout_s: float = 5.0) -> tuple[WaveHook, WaveHook]:
    """Hooks that scrape before and after each wave; ``timeout_s`` bounds a whole scrape
    (connect, headers and body), so a wave waits at most that long on each side of it."""
    url = metrics_url(dep)
    absent: str | None = None  # set once the server has said it has no metrics endpoint

    def fail(wave: WaveRecord, phase: str, why: str) -> None:
        msg = f"{phase}: {why}"
        wave.metrics_error = msg if wave.metrics_error is None else f"{wave.metrics_error}; {msg}"

    async def scrape(wave: WaveRecord, phase: str) -> None:
        nonlocal absent
        if absent is not None:
            fail(wave, phase, absent)
            return
        headers = {k: v for k, v in request_headers(dep, url).items() if k != "Accept"}
        try:
            async with make_client(dep, 1) as c:
                status, body = await fetch_bounded(c, url, headers, timeout_s, MAX_METRICS_BYTES)
        except FetchFailed as exc:
            fail(wave, phase, str(exc))
            return
        if status == 404:
            absent = f"no metrics endpoint ({url} answered 404)"
            fail(wave, phase, absent)
            return
        if status != 200:
            fail(wave, phase, f"HTTP {status} from {url}")
            return
        try:
            samples = parse_prometheus(body.decode("utf-8", errors="replace"))
        except MetricsParseError as exc:
            fail(wave, phase, str(exc))
            return
        wave.server_metrics.extend((phase, n, lb, v) for n, lb, v in samples)

    async def before(wave: WaveRecord) -> None:
        await scrape(wave, "before")

    async def after(wave: WaveRecord) -> None:
        await scrape(wave, "after")

    return before, after
