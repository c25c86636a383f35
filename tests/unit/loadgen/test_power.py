"""Power readings: what a hostile or N/A source sends is an unavailable reading with its
reason, never a 0 and never an exception (no sockets: pages and NVML are given)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from pydantic import ValidationError

from sparkcap.config.deployment import Deployment
from sparkcap.config.power import PowerSource
from sparkcap.loadgen import power as power_mod
from sparkcap.loadgen.power import NVML_MISSING, nvml_readings, page_readings, with_power
from sparkcap.loadgen.records import WaveRecord
from tests.support.waves import wave_record

DCGM = PowerSource(kind="dcgm", url="http://dcgm:9400/metrics")


def dcgm_page(*lines: str) -> str:
    return (
        "\n".join(
            [
                "# TYPE DCGM_FI_DEV_POWER_USAGE gauge",
                "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter",
                *lines,
            ]
        )
        + "\n"
    )


def test_dcgm_reads_each_gpus_draw_and_its_energy_counter_in_joules() -> None:
    page = dcgm_page(
        'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a"} 212.5',
        'DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-b"} 80',
        'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-a"} 123456789',
        'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",GPU_I_ID="1"} 999',  # a repeat: ignored
        "DCGM_FI_DEV_SM_CLOCK 1500",
    )
    assert page_readings(DCGM, page) == [
        ("gpu=0", "DCGM_FI_DEV_POWER_USAGE", "power_w", 212.5, None),
        ("gpu=1", "DCGM_FI_DEV_POWER_USAGE", "power_w", 80.0, None),
        ("gpu=0", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "energy_j", 123456.789, None),
    ]
    only_1 = DCGM.model_copy(update={"gpus": (1,)})
    assert [r[0] for r in page_readings(only_1, page)] == ["gpu=1"]


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("-5", "negative reading -5"),
        ("NaN", "nan is not a number a sensor reads"),
        ("+Inf", "inf is not a number a sensor reads"),
        ("1e12", "1e+12 W is beyond any sensor"),
    ],
)
def test_a_hostile_draw_is_unavailable_with_its_reason(value: str, why: str) -> None:
    (reading,) = page_readings(DCGM, dcgm_page(f'DCGM_FI_DEV_POWER_USAGE{{gpu="0"}} {value}'))
    sensor, _, quantity, got, reason = reading
    assert (sensor, quantity, got) == ("gpu=0", "power_w", None)
    assert reason is not None and reason.startswith(why)


def test_a_page_that_does_not_parse_or_lacks_the_series_is_one_unavailable_reading() -> None:
    (bad,) = page_readings(DCGM, dcgm_page('DCGM_FI_DEV_POWER_USAGE{gpu="0"} lots'))
    assert bad[:4] == (None, None, None, None) and "not Prometheus text" in str(bad[4])
    (html,) = page_readings(DCGM, "<html>login</html>\n")
    assert html[3] is None and html[4] is not None
    (none,) = page_readings(DCGM, "# TYPE DCGM_FI_DEV_SM_CLOCK gauge\nDCGM_FI_DEV_SM_CLOCK 1\n")
    assert none[3] is None
    assert none[4] == (
        "no DCGM_FI_DEV_POWER_USAGE or DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION on the page"
    )
    gpu_7 = DCGM.model_copy(update={"gpus": (7,)})
    (absent,) = page_readings(gpu_7, dcgm_page('DCGM_FI_DEV_POWER_USAGE{gpu="0"} 100'))
    assert absent[4] is not None and absent[4].endswith("for gpus [7] on the page")


def test_node_exporter_reads_hwmon_watts_and_rapl_package_and_dram_counters() -> None:
    node = PowerSource(kind="node-exporter", url="http://host:9100/metrics")
    page = (
        "# TYPE node_hwmon_power_watts gauge\n"
        'node_hwmon_power_watts{chip="platform_gb10",sensor="power1"} 95.5\n'
        "# TYPE node_rapl_package_joules_total counter\n"
        'node_rapl_package_joules_total{index="0",path="/sys/x"} 5000.25\n'
        "# TYPE node_rapl_core_joules_total counter\n"
        'node_rapl_core_joules_total{index="0",path="/sys/y"} 4000\n'
        "# TYPE node_rapl_dram_joules_total counter\n"
        'node_rapl_dram_joules_total{index="0",path="/sys/z"} 300\n'
    )
    assert page_readings(node, page) == [
        ("hwmon=platform_gb10:power1", "node_hwmon_power_watts", "power_w", 95.5, None),
        ("rapl=package:0", "node_rapl_package_joules_total", "energy_j", 5000.25, None),
        ("rapl=dram:0", "node_rapl_dram_joules_total", "energy_j", 300.0, None),
    ]
    # a named series is read alone: here the core counter the defaults leave out
    core = node.model_copy(update={"metric": "node_rapl_core_joules_total"})
    assert page_readings(core, page) == [
        ("rapl=core:0", "node_rapl_core_joules_total", "energy_j", 4000.0, None)
    ]


class NotSupported(Exception):
    pass


class FakeNVML:
    """pynvml's surface as sparkcap uses it: GPU 0 reads N/A for its energy counter (as DGX
    Spark's GB10 does), GPU 1 answers a hostile draw."""

    NVMLError = Exception
    NVMLError_NotSupported = NotSupported

    def __init__(self) -> None:
        self.inits = self.shutdowns = 0

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        if h == 0:
            raise NotSupported("Not Supported")
        return 7_000

    def nvmlDeviceGetPowerUsage(self, h: int) -> Any:
        return 41_500 if h == 0 else float("nan")


def test_nvml_na_is_unavailable_never_zero_and_missing_nvml_says_so() -> None:
    nvml = PowerSource(kind="nvml")
    fake = FakeNVML()
    got = nvml_readings(nvml, fake)
    assert got[0] == (
        "gpu=0",
        "nvmlDeviceGetTotalEnergyConsumption",
        "energy_j",
        None,
        "N/A: NVML does not support it",
    )
    assert got[1] == ("gpu=0", "nvmlDeviceGetPowerUsage", "power_w", 41.5, None)
    assert got[2] == ("gpu=1", "nvmlDeviceGetTotalEnergyConsumption", "energy_j", 7.0, None)
    assert got[3][3] is None and "not a number" in str(got[3][4])
    assert fake.inits == fake.shutdowns == 1
    assert nvml_readings(nvml, None) == [(None, None, None, None, NVML_MISSING)]


def test_the_hooks_read_before_during_and_after_a_wave(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(power_mod, "pynvml", None)  # whatever this host has
    dep = Deployment(
        name="d",
        model="m",
        endpoint="http://x/v1",
        power={"kind": "nvml", "interval_s": 0.05},
    )
    calls: list[str] = []

    async def metrics_before(_: WaveRecord) -> None:
        calls.append("metrics before")

    async def metrics_after(_: WaveRecord) -> None:
        calls.append("metrics after")

    before, after = with_power(dep, (metrics_before, metrics_after))
    w = wave_record(1, wave_id="w")

    async def run() -> None:
        await before(w)
        # until a round has been read during the wave (a fixed sleep lost it to a busy machine)
        async with asyncio.timeout(30):
            while len(w.power_samples) < 2:
                await asyncio.sleep(0.01)
        await after(w)

    asyncio.run(run())
    assert calls == ["metrics before", "metrics after"]
    seqs = [s.seq for s in w.power_samples]
    assert seqs == sorted(seqs) and seqs[0] == 0 and len(seqs) >= 3
    assert all(s.status == "unavailable" and s.reason == NVML_MISSING for s in w.power_samples)
    assert all(s.value is None and s.source == "nvml" for s in w.power_samples)
    ts = [s.t_ns for s in w.power_samples]
    assert ts == sorted(ts) and not any(math.isnan(t) for t in ts)
    unpowered = Deployment(name="d", model="m", endpoint="http://x/v1")
    assert with_power(unpowered, (metrics_before, metrics_after)) == (
        metrics_before,
        metrics_after,
    )


def test_a_pages_reads_share_one_client_per_wave_made_before_it_and_closed_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Making a client loads the TLS trust store (~24 ms of a blocked loop): a client per
    read cost that every interval while the wave's chunks were stamped on the same loop."""
    made: list[FakeClient] = []

    class FakeClient:
        closed = False

        async def aclose(self) -> None:
            self.closed = True

    def make_client(*_: Any) -> FakeClient:
        made.append(FakeClient())
        return made[-1]

    used: list[object] = []

    async def fetch_bounded(client: object, *_: Any) -> tuple[int, bytes]:
        used.append(client)
        return 200, dcgm_page('DCGM_FI_DEV_POWER_USAGE{gpu="0"} 100.0').encode()

    monkeypatch.setattr(power_mod, "make_client", make_client)
    monkeypatch.setattr(power_mod, "fetch_bounded", fetch_bounded)
    dep = Deployment(
        name="d",
        model="m",
        endpoint="http://x/v1",
        power={"kind": "dcgm", "url": "http://dcgm:9400/metrics", "interval_s": 0.05},
    )

    async def noop(_: WaveRecord) -> None:
        pass

    before, after = with_power(dep, (noop, noop))

    async def one_wave() -> WaveRecord:
        w = wave_record(1, wave_id="w")
        await before(w)
        assert len(made) == len(waves) + 1 and not made[-1].closed  # made before the streams
        async with asyncio.timeout(30):
            while len(w.power_samples) < 3:  # two rounds during the wave
                await asyncio.sleep(0.01)
        await after(w)
        return w

    waves: list[WaveRecord] = []
    for _ in range(2):
        waves.append(asyncio.run(one_wave()))
    assert len(made) == 2 and all(c.closed for c in made)
    assert len(used) >= 2 * 4, len(used)  # before, twice during and after each wave
    first_wave_reads = len(waves[0].power_samples)
    assert used[:first_wave_reads] == [made[0]] * first_wave_reads
    assert set(map(id, used[first_wave_reads:])) == {id(made[1])}
    assert all(s.status == "ok" and s.value == 100.0 for w in waves for s in w.power_samples)


@pytest.mark.parametrize(
    "given",
    [
        {"kind": "dcgm"},  # an exporter needs its page
        {"kind": "nvml", "url": "http://h/metrics"},
        {"kind": "dcgm", "url": "http://user:secret@h/metrics"},
        {"kind": "dcgm", "url": "http://h/metrics", "gpus": [True]},
        {"kind": "dcgm", "url": "http://h/metrics", "gpus": [0, 0]},
        {"kind": "dcgm", "url": "http://h/metrics", "interval_s": float("nan")},
        {"kind": "dcgm", "url": "http://h/metrics", "metric": "bad name"},
        {"kind": "ipmi", "url": "http://h/metrics"},
    ],
)
def test_a_power_source_that_cannot_be_read_is_refused_up_front(given: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        PowerSource(**given)
