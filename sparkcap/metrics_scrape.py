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
import json
from collections.abc import Awaitable, Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sparkcap.config import Deployment
from sparkcap.loadgen.connections import make_client
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


class ScrapeFailed(Exception):
    """One scrape that produced no samples; the message is what its wave records."""


async def fetch_metrics(
    client: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    total_s: float,
    max_bytes: int = MAX_METRICS_BYTES,
) -> tuple[int, bytes]:
    """The status and body of one scrape, within ``total_s`` in all and never more than
    ``max_bytes`` held: httpx's timeout bounds each read, so a body trickling a byte at a time
    would hold the wave for as long as the server likes, and reading the whole body before
    measuring it lets a server fill the client's memory."""
    try:
        async with asyncio.timeout(total_s):
            async with client.stream("GET", url, headers=headers) as r:
                if r.status_code != 200:
                    return r.status_code, b""
                encoding = r.headers.get("content-encoding", "identity").strip().lower()
                if encoding not in ("", "identity"):
                    # asked for identity: decoding anyway would let a small body expand unbounded
                    raise ScrapeFailed(f"body sent with Content-Encoding {encoding!r} from {url}")
                body = bytearray()
                async for piece in r.aiter_raw():
                    body += piece
                    if len(body) > max_bytes:
                        raise ScrapeFailed(f"body larger than {max_bytes} bytes from {url}")
                return r.status_code, bytes(body)
    except TimeoutError:
        raise ScrapeFailed(f"no complete answer within {total_s:g} s from {url}") from None
    except httpx.HTTPError as exc:
        raise ScrapeFailed(f"{type(exc).__name__} from {url}") from None


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
        headers = {k: v for k, v in request_headers(dep).items() if k != "Accept"}
        headers["Accept-Encoding"] = "identity"
        try:
            async with make_client(dep, 1) as c:
                status, body = await fetch_metrics(c, url, headers, timeout_s)
        except ScrapeFailed as exc:
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
