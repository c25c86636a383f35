"""The deployment's power draw, read while each wave runs, for the energy of each wave.

A wave's energy is the integral of the power its hardware drew while it ran, so the power
source is read from just before the streams are released until just after the last one ends:
a sampling round at once, one every ``interval_s`` in a task of its own (a slow exporter
delays no stream), and a last one after the wave. Each round reads every sensor once; dbt
integrates the readings (``int_wave_energy``), preferring an energy counter where one is read.

Sources:
- DCGM exporter: ``DCGM_FI_DEV_POWER_USAGE`` (W, per ``gpu`` label) and, where the exporter
  has it enabled, ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ since the driver loaded);
- node exporter: ``node_hwmon_power_watts`` and RAPL's ``node_rapl_{package,dram}_joules_total``
  counters (core and uncore lie within package and are not added again);
- NVML on this host, through ``pynvml`` where it is installed.

Every reading a source cannot give is a row with status ``unavailable`` and the reason (on DGX
Spark NVML answers N/A for some fields; an exporter may be down, answer 404, or send a page
that does not parse or a value no sensor can read), never a 0 and never an exception: the
wave's own measurements matter more than its energy. An exporter is another service than the
server measured, so it is sent none of the deployment's headers or keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import math
import time
from collections.abc import Callable
from typing import Any

import httpx

from sparkcap.config.deployment import Deployment
from sparkcap.config.power import PowerSource
from sparkcap.loadgen.connections import (
    IDENTITY_ENCODING,
    TIMEOUTS_BEFORE_GIVING_UP,
    FetchFailed,
    FetchTimedOut,
    fetch_bounded,
    make_client,
)
from sparkcap.loadgen.metrics import (
    MAX_METRICS_BYTES,
    MetricsParseError,
    WaveHook,
    parse_prometheus,
)
from sparkcap.loadgen.records import PowerSample, WaveRecord

try:  # optional: only a host with NVIDIA's Python bindings can read NVML
    pynvml: Any = importlib.import_module("pynvml")
except ImportError:
    pynvml = None

DCGM_POWER = "DCGM_FI_DEV_POWER_USAGE"
DCGM_ENERGY_MJ = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
HWMON_POWER = "node_hwmon_power_watts"
RAPL_ENERGY = ("node_rapl_package_joules_total", "node_rapl_dram_joules_total")
NVML_MISSING = "NVML not available on this host"
# one sensor drawing more than 100 kW (a rack is ~40 kW) is a unit error or a broken exporter
MAX_POWER_W = 1e5
# an energy counter past a petajoule (a 1 kW GPU for 30 years is ~1e12 J) is no counter
MAX_ENERGY_J = 1e15
# rounds kept per wave: at the default 0.5 s, more than an hour; the round after the wave
# is taken whatever this says, so a longer wave still has its end
MAX_ROUNDS = 8000
SCRAPE_TIMEOUT_S = 5.0

# (sensor, metric, quantity, value, reason): value None exactly when reason says why
Reading = tuple[str | None, str | None, str | None, float | None, str | None]


def value_problem(quantity: str, value: float) -> str | None:
    """Why ``value`` is no reading of ``quantity`` (None: it is one)."""
    if not math.isfinite(value):
        return f"{value} is not a number a sensor reads"
    if value < 0:
        return f"negative reading {value:g}"
    limit = MAX_POWER_W if quantity == "power_w" else MAX_ENERGY_J
    if value > limit:
        unit = "W" if quantity == "power_w" else "J"
        return f"{value:g} {unit} is beyond any sensor (limit {limit:g} {unit})"
    return None


def _reading(sensor: str, metric: str, quantity: str, value: float) -> Reading:
    problem = value_problem(quantity, value)
    if problem is not None:
        return sensor, metric, quantity, None, problem
    return sensor, metric, quantity, value, None


def _quantity_of(metric: str) -> tuple[str, float]:
    """(quantity, factor to its unit) of a series named by ``PowerSource.metric``."""
    if metric == DCGM_ENERGY_MJ:
        return "energy_j", 1e-3
    if metric.endswith(("_joules_total", "_joules")):
        return "energy_j", 1.0
    return "power_w", 1.0


def _wanted(power: PowerSource) -> dict[str, tuple[str, float]]:
    """Series name → (quantity, factor) that this source reads."""
    if power.metric is not None:
        return {power.metric: _quantity_of(power.metric)}
    if power.kind == "dcgm":
        return {DCGM_POWER: ("power_w", 1.0), DCGM_ENERGY_MJ: ("energy_j", 1e-3)}
    return {HWMON_POWER: ("power_w", 1.0)} | {n: ("energy_j", 1.0) for n in RAPL_ENERGY}


def _sensor(kind: str, name: str, labels: dict[str, str]) -> str:
    if "gpu" in labels:
        return f"gpu={labels['gpu']}"
    if name.startswith("node_rapl_"):
        zone = name.removeprefix("node_rapl_").removesuffix("_joules_total")
        return f"rapl={zone}:{labels.get('index', '')}"
    if "chip" in labels:
        return f"hwmon={labels['chip']}:{labels.get('sensor', '')}"
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or kind


def page_readings(power: PowerSource, text: str) -> list[Reading]:
    """The readings of one exporter page: the series this source reads, one per sensor
    (the first, should a page repeat one), only the GPUs asked for. A page without any of
    them, or that does not parse, is one unavailable reading saying so."""
    try:
        samples = parse_prometheus(text)
    except MetricsParseError as exc:
        return [(None, None, None, None, str(exc))]
    wanted = _wanted(power)
    out: list[Reading] = []
    seen: set[tuple[str, str]] = set()
    for sample_name, labels, value in samples:
        # prometheus-client names a counter's samples ``<family>_total`` (DCGM's energy
        # counter has no such suffix on the page)
        name = sample_name if sample_name in wanted else sample_name.removesuffix("_total")
        if name not in wanted:
            continue
        if power.gpus is not None:
            gpu = labels.get("gpu", "")
            if not gpu.isdigit() or int(gpu) not in power.gpus:
                continue
        sensor = _sensor(power.kind, name, labels)
        if (name, sensor) in seen:
            continue
        seen.add((name, sensor))
        quantity, factor = wanted[name]
        out.append(_reading(sensor, name, quantity, value * factor))
    if not out:
        which = " or ".join(sorted(wanted))
        gpus = "" if power.gpus is None else f" for gpus {list(power.gpus)}"
        out.append((None, None, None, None, f"no {which}{gpus} on the page"))
    return out


def nvml_readings(power: PowerSource, nvml: Any) -> list[Reading]:
    """Every GPU's energy counter and power draw from NVML (``nvml`` is the ``pynvml``
    module, or None where it is not installed). A field NVML answers N/A for (DGX Spark's
    GB10 does for some) is an unavailable reading of that field; the other still counts."""
    if nvml is None:
        return [(None, None, None, None, NVML_MISSING)]
    not_supported = getattr(nvml, "NVMLError_NotSupported", ())
    nvml_error = getattr(nvml, "NVMLError", Exception)
    try:
        nvml.nvmlInit()
    except nvml_error as exc:
        return [(None, None, None, None, f"NVML: {str(exc)[:160] or type(exc).__name__}")]
    try:
        return _nvml_fields(power, nvml, not_supported, nvml_error)
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()  # NVML counts its inits: one shutdown for each


def _nvml_fields(
    power: PowerSource, nvml: Any, not_supported: Any, nvml_error: Any
) -> list[Reading]:
    try:
        indices = power.gpus if power.gpus is not None else range(nvml.nvmlDeviceGetCount())
        handles = [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in indices]
    except nvml_error as exc:
        return [(None, None, None, None, f"NVML: {str(exc)[:160] or type(exc).__name__}")]
    out: list[Reading] = []
    fields: tuple[tuple[str, str, float], ...] = (
        ("nvmlDeviceGetTotalEnergyConsumption", "energy_j", 1e-3),  # mJ
        ("nvmlDeviceGetPowerUsage", "power_w", 1e-3),  # mW
    )
    for i, handle in handles:
        for call, quantity, factor in fields:
            try:
                raw = getattr(nvml, call)(handle)
                value = float(raw) * factor
            except not_supported:
                out.append((f"gpu={i}", call, quantity, None, "N/A: NVML does not support it"))
                continue
            except (nvml_error, TypeError, ValueError) as exc:
                why = f"NVML: {str(exc)[:160] or type(exc).__name__}"
                out.append((f"gpu={i}", call, quantity, None, why))
                continue
            out.append(_reading(f"gpu={i}", call, quantity, value))
    return out


def sample_power_into(dep: Deployment, power: PowerSource) -> tuple[WaveHook, WaveHook]:
    """Hooks that read ``power`` around and during each wave into its ``power_samples``."""
    url = str(power.url) if power.url is not None else None
    # not asked again: the exporter said it has no such page, or the page missed the deadline
    # TIMEOUTS_BEFORE_GIVING_UP times running (each miss holds the wave for the deadline)
    absent: str | None = None
    missed = 0
    running: dict[str, asyncio.Task[None]] = {}
    rounds: dict[str, int] = {}
    # one client per wave, made before its streams start and closed after they end: making
    # one loads the TLS trust store (~24 ms of a blocked event loop), which a client per read
    # cost every interval_s while the wave's chunks were being stamped on that loop
    clients: dict[str, httpx.AsyncClient] = {}

    async def read_page(wave: WaveRecord) -> list[Reading]:
        nonlocal absent, missed
        assert url is not None
        if absent is not None:
            return [(None, None, None, None, absent)]
        try:
            status, body = await fetch_bounded(
                clients[wave.wave_id],
                url,
                dict(IDENTITY_ENCODING),
                SCRAPE_TIMEOUT_S,
                MAX_METRICS_BYTES,
            )
        except FetchTimedOut as exc:
            missed += 1
            if missed >= TIMEOUTS_BEFORE_GIVING_UP:
                absent = (
                    f"not asked again in this sweep: {missed} reads running got no complete "
                    f"answer within {SCRAPE_TIMEOUT_S:g} s from {url}"
                )
            return [(None, None, None, None, str(exc))]
        except FetchFailed as exc:
            missed = 0
            return [(None, None, None, None, str(exc))]
        missed = 0
        if status == 404:
            absent = f"no power page ({url} answered 404)"
            return [(None, None, None, None, absent)]
        if status != 200:
            return [(None, None, None, None, f"HTTP {status} from {url}")]
        return page_readings(power, body.decode("utf-8", errors="replace"))

    read: Callable[[WaveRecord], Any]
    if power.kind == "nvml":

        async def read_nvml(_: WaveRecord) -> list[Reading]:
            return await asyncio.to_thread(nvml_readings, power, pynvml)

        read = read_nvml
    else:
        read = read_page

    async def one_round(wave: WaveRecord) -> None:
        seq = rounds.get(wave.wave_id, 0)
        rounds[wave.wave_id] = seq + 1
        t0 = time.perf_counter_ns()
        try:
            readings: list[Reading] = await read(wave)
        except Exception as exc:  # a sampler fault costs the wave its energy, never itself
            readings = [(None, None, None, None, f"power sampler failed: {type(exc).__name__}")]
        # a reading stands for the middle of the request that fetched it, known to within half
        # its round trip: stored, so a mean power states what the stamps allow
        t1 = time.perf_counter_ns()
        t_ns = (t0 + t1) // 2 - wave.anchor_perf_ns
        wave.power_samples.extend(
            PowerSample(
                seq=seq,
                t_ns=t_ns,
                source=power.kind,
                sensor=sensor,
                metric=metric,
                quantity=quantity,
                value=value,
                status="ok" if reason is None else "unavailable",
                reason=reason,
                read_rtt_ns=t1 - t0,
            )
            for sensor, metric, quantity, value, reason in readings
        )

    async def sample_during(wave: WaveRecord) -> None:
        start = time.perf_counter()
        for k in range(1, MAX_ROUNDS - 1):
            # on a fixed grid: a slow exporter delays the next round, never the whole series
            await asyncio.sleep(max(0.0, start + k * power.interval_s - time.perf_counter()))
            await one_round(wave)

    async def before(wave: WaveRecord) -> None:
        if url is not None and absent is None:  # outside the first round's timed read
            clients[wave.wave_id] = make_client(dep, 1)
        await one_round(wave)
        running[wave.wave_id] = asyncio.create_task(sample_during(wave))

    async def after(wave: WaveRecord) -> None:
        task = running.pop(wave.wave_id, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        try:
            await one_round(wave)
        finally:
            rounds.pop(wave.wave_id, None)
            client = clients.pop(wave.wave_id, None)
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.aclose()

    return before, after


def with_power(dep: Deployment, hooks: tuple[WaveHook, WaveHook]) -> tuple[WaveHook, WaveHook]:
    """``hooks`` (the server's /metrics scrapes) with the deployment's power source read
    inside them, so the power series spans the wave and not the scrapes; unchanged when the
    deployment names no power source."""
    if dep.power is None:
        return hooks
    metrics_before, metrics_after = hooks
    power_before, power_after = sample_power_into(dep, dep.power)

    async def before(wave: WaveRecord) -> None:
        await metrics_before(wave)
        await power_before(wave)

    async def after(wave: WaveRecord) -> None:
        await power_after(wave)
        await metrics_after(wave)

    return before, after
