"""Nightly histories in model time, for change detection.

A night here is what a sweep would have recorded, without the sweep: each level's trials are
waves whose streams decode 101 tokens at given rates, all released together, written through
the store's staging API (run start with the deployment, each wave, the discovered engine
version, run end) so that dbt judges them exactly as it judges a real night. Twelve real
sweeps would take minutes; these take a second, and their rates are known exactly.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sparkcap.config.deployment import Deployment
from sparkcap.loadgen.discover import FactRow
from sparkcap.loadgen.records import WaveRecord
from sparkcap.store.connection import open_warehouse
from sparkcap.store.runs import record_discovered_facts_to, record_run_end, record_run_start
from sparkcap.store.staging import stage_wave
from tests.support.waves import add_ok_stream, decode_ns, wave_record

LEVELS = (1, 2, 4, 8)
# per-stream decode rates (tok/s) by level: at the 20 tok/s threshold the capacity is 4, and
# 8 % slower it is 2 (21.0 → 19.3 at four streams)
BASE_RATES_TOK_S = {1: 60.0, 2: 42.0, 4: 21.0, 8: 12.0}
DAY_NS = 86_400 * 10**9
FIRST_NIGHT_NS = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z
TOKENS = 101
DEFAULT_TTFT_S = 0.1


@dataclass
class Night:
    """One night of one deployment: every rate times ``speed``; ``starved``: the client was
    CPU-starved, its waves' timing error bound far past the tolerance (int_trials marks them
    invalid); ``engine_version``: what the server's /version said (None: not asked)."""

    speed: float = 1.0
    starved: bool = False
    engine_version: str | None = None


@dataclass
class History:
    deployment: str
    nights: Sequence[Night]
    rates_tok_s: dict[int, float] = field(default_factory=lambda: dict(BASE_RATES_TOK_S))
    trials: int = 3
    levels: Sequence[int] = LEVELS
    trial_noise: float = 0.01  # sd of a trial's rate, relative
    stream_spread: float = 0.02  # a stream's rate within its trial: ± this, uniform
    # each level's time to first token (s), every stream of it alike; unset: DEFAULT_TTFT_S
    ttft_s: dict[int, float] = field(default_factory=dict)
    # each level's server gauges read during its waves: (name, value), e.g. vLLM's
    # ("vllm:num_requests_waiting", 4.0); unset: no /metrics
    gauges: dict[int, list[tuple[str, float]]] = field(default_factory=dict)
    # the fleet the nights measured, recorded as a fleet night records it (its file's name);
    # None: ad-hoc sweeps, which have no fleet
    fleet: str | None = None

    @classmethod
    def exact(
        cls,
        deployment: str,
        nights: Sequence[Night],
        rates_tok_s: dict[int, float],
        ttft_s: dict[int, float] | None = None,
        fleet: str | None = None,
    ) -> History:
        """One trial a level, no trial noise, no spread between streams: the marts' figures are
        the staged ones, for tests that assert them exactly."""
        return cls(
            deployment,
            nights,
            rates_tok_s=rates_tok_s,
            trials=1,
            levels=tuple(sorted(rates_tok_s)),
            trial_noise=0.0,
            stream_spread=0.0,
            ttft_s=ttft_s or {},
            fleet=fleet,
        )


def run_id_for(deployment: str, night: int) -> str:
    return f"2026{night:04d}T000000Z-{deployment}"


def _wave(
    run_id: str,
    deployment: str,
    concurrency: int,
    trial: int,
    rates: Sequence[float],
    at_ns: int,
    ttft_s: float,
) -> WaveRecord:
    wave = wave_record(
        concurrency, trial, run_id=run_id, deployment=deployment, started_at_ns=at_ns
    )
    first_token_ns = round(ttft_s * 1e9)
    for rate in rates:
        last_token_ns = first_token_ns + decode_ns(TOKENS, rate)
        add_ok_stream(wave, TOKENS, first_token_ns, last_token_ns).end_ns = last_token_ns
    return wave


def stage_history(db_path: Path, history: History, seed: int) -> list[str]:
    """Stage every night of ``history`` (night 1 first, one day apart); its run ids. One
    connection for the whole history: a connection per wave made twelve nights take 25 s."""
    rng = random.Random(f"{seed}/{history.deployment}")
    deployment = Deployment(name=history.deployment, endpoint="http://127.0.0.1:9/v1", model="m")
    run_ids = []
    versions: dict[str, str] = {}
    with open_warehouse(db_path) as con:
        for index, night in enumerate(history.nights, start=1):
            run_id = run_id_for(history.deployment, index)
            start_ns = FIRST_NIGHT_NS + index * DAY_NS
            config = {} if history.fleet is None else {"fleet": {"name": history.fleet}}
            record_run_start(con, run_id, config, start_ns, [deployment])
            for concurrency in history.levels:
                for trial in range(1, history.trials + 1):
                    trial_rate = (
                        history.rates_tok_s[concurrency]
                        * night.speed
                        * rng.gauss(1.0, history.trial_noise)
                    )
                    spread = history.stream_spread
                    rates = [
                        trial_rate * (1 + rng.uniform(-spread, spread)) for _ in range(concurrency)
                    ]
                    at_ns = start_ns + (concurrency * 10 + trial) * 10**10
                    ttft_s = history.ttft_s.get(concurrency, DEFAULT_TTFT_S)
                    wave = _wave(
                        run_id, history.deployment, concurrency, trial, rates, at_ns, ttft_s
                    )
                    if night.starved:
                        wave.timing_error_bound, wave.loop_lag_max_ms = 0.04, 250.0
                    wave.server_metrics = [
                        ("during", name, {}, value)
                        for name, value in history.gauges.get(concurrency, [])
                    ]
                    stage_wave(con, wave)
            record_run_end(con, run_id, "complete")
            if night.engine_version is not None:
                versions[run_id] = night.engine_version
            run_ids.append(run_id)
    for run_id, engine_version in versions.items():
        version = FactRow("engine_version", None, "vllm-version", text_value=engine_version)
        record_discovered_facts_to(db_path, run_id, history.deployment, [version])
    return run_ids
