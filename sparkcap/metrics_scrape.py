"""Prometheus-text scrapes of the server before and after each wave.

llama.cpp (``--metrics``), vLLM and SGLang expose counters such as speculative draft and
accept totals; their difference across a wave is the wave's acceptance rate. Servers without
``/metrics`` are skipped quietly after the first miss.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

import httpx

from sparkcap.config import Deployment
from sparkcap.loadgen.records import WaveRecord

_LINE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)"
)
MAX_METRICS_BYTES = 4 << 20


def parse_prometheus(text: str) -> list[tuple[str, str, float]]:
    out: list[tuple[str, str, float]] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        out.append((m.group("name"), m.group("labels") or "", value))
    return out


def metrics_url(dep: Deployment) -> str:
    if dep.metrics_url is not None:
        return str(dep.metrics_url)
    base = str(dep.endpoint).rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return base + "/metrics"


WaveHook = Callable[[WaveRecord], Awaitable[None]]


def scrape_into(dep: Deployment, timeout_s: float = 5.0) -> tuple[WaveHook, WaveHook]:
    url = metrics_url(dep)
    enabled = True

    async def scrape(wave: WaveRecord, phase: str) -> None:
        nonlocal enabled
        if not enabled:
            return
        try:
            async with httpx.AsyncClient(
                timeout=timeout_s, follow_redirects=False, trust_env=False
            ) as c:
                r = await c.get(url)
        except httpx.HTTPError:
            enabled = False
            return
        if r.status_code != 200 or len(r.content) > MAX_METRICS_BYTES:
            enabled = False
            return
        wave.server_metrics.extend((phase, n, lb, v) for n, lb, v in parse_prometheus(r.text))

    async def before(wave: WaveRecord) -> None:
        await scrape(wave, "before")

    async def after(wave: WaveRecord) -> None:
        await scrape(wave, "after")

    return before, after
