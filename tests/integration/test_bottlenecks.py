"""A verdict per bottleneck, on simulated servers whose truth is known.

Each deployment is a simulator profile built to be limited by one thing: the memory
bandwidth (a dense model whose KV traffic grows with the streams), request slots (two slots,
llama-server's metric names and /props), KV capacity (vLLM's names, a cache that holds four
streams' context), a batch-size bucket (a padded batch of 5 slower than 8) and slow chunked
prefills that stall the streams already decoding. One night sweeps all five; dbt's
fct_bottlenecks must name each one's limit, and the bound it computes must be the
simulator's own.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sparkcap.config.deployment import Deployment
from sparkcap.config.plan import SweepPlan, SweepRequest
from sparkcap.night.sweeps import run_sweeps
from sparkcap.servers.sim.physics import bandwidth_bound_tok_s
from sparkcap.servers.sim.profile import SimProfile
from sparkcap.servers.sim.server import SimServer
from sparkcap.transform.dbt_build import build
from tests.spread import within
from tests.support.queries import q
from tests.support.sims import fast_profile
from tests.support.timing import SHORT_STREAM_VARS

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BANDWIDTH = SimProfile(
    model="bw",
    draft_tokens=0,
    memory_bandwidth_gb_s=273,
    bandwidth_efficiency=0.8,
    weight_bytes=2e9,
    kv_bytes_per_token=8e6,
)
SLOTS = fast_profile("slots", max_slots=2, draft_tokens=0, metric_style="llamacpp")
KV = fast_profile("kv", draft_tokens=0, kv_capacity_tokens=600, metric_style="vllm")
# slow, chunked prefill: eight streams' prompts take ~4 s, and every iteration that carries a
# prefill chunk stalls the streams already decoding (vLLM's names: waiting 0, running 8)
PREFILL = fast_profile(
    "prefill", draft_tokens=0, prefill_tok_s=150, prefill_chunk=32, metric_style="vllm"
)
BUCKETS = fast_profile(
    "dip",
    step_s1=0.0189,
    batch_slowdown=0.2,
    context_slowdown=0.0,
    draft_tokens=0,
    batch_buckets=[1, 2, 4, 8],
    bucket_pad_slowdown=0.3,
)


def _request(sim: SimServer, model: str, levels: tuple[int, ...], **facts: object) -> SweepRequest:
    dep = Deployment(
        name=model,
        endpoint=sim.endpoint,  # type: ignore[arg-type]
        model=model,
        extra_body={"ignore_eos": True},
        facts=facts,  # type: ignore[arg-type]
    )
    plan = SweepPlan(levels=levels, trials=1, warmup=False, max_tokens=60, max_remeasures=0)
    return SweepRequest(deployment=dep, workload="code", plan=plan)


# the simulated rates sit near the threshold: with the parallel workers and a CPU burner
# beside it, a starved simulator missed its schedule (23 -> 17 tok/s; a bucket dip gone), so
# it runs with the timing tests, alone
@pytest.mark.client_timing
def test_each_simulated_limit_gets_its_verdict(db_path: Path) -> None:
    with (
        SimServer([BANDWIDTH]) as bw,
        SimServer([SLOTS]) as slots,
        SimServer([KV]) as kv,
        SimServer([BUCKETS]) as dip,
        SimServer([PREFILL]) as prefill,
    ):
        requests = [
            _request(
                bw,
                "bw",
                (4, 8, 16),
                memory_bandwidth_gb_s=273,
                weight_bytes=2e9,
                kv_bytes_per_token=8e6,
            ),
            # three rounds of two at 6 streams: a client stall at one round's end can read the
            # next round's first tokens before this one's last (four "decoding at once" at 4
            # streams, so not queued), never all six at once; and the
            # third round's TTFT spread (~2.6 s) clears queued_ttft_min_s (2 s) as well
            _request(slots, "slots", (2, 6)),
            # 12 streams on a cache that holds four: as with the slots, a late read of one
            # round's last chunk (a loop stamp) after the next round's kernel-stamped first
            # token can join two rounds into "8 decoding at once" beside 8 busy processes
            # (benchmarks/timing_spread.py); three rounds cannot all join
            _request(kv, "kv", (2, 12)),
            _request(dip, "dip", (4, 5, 8)),
            _request(prefill, "prefill", (1, 8)),
        ]
        run_id = asyncio.run(run_sweeps(requests, db_path)).run_id
    build(
        db_path,
        select="+fct_bottlenecks +fct_level_bounds +fct_server_evidence",
        dbt_vars=SHORT_STREAM_VARS,
    )
    verdicts = {
        r[0]: r[1:]
        for r in q(
            db_path,
            "select deployment, bottleneck, limit_level, evidence, confidence "
            "from marts.fct_bottlenecks where run_id = ?",
            [run_id],
        )
    }
    bounds = q(
        db_path,
        "select concurrency, mean_context_tokens, bound_decode_tok_s, share_of_bound "
        "from marts.fct_level_bounds where run_id = ? and deployment = 'bw' "
        "order by concurrency",
        [run_id],
    )
    (sampled_during,) = q(
        db_path,
        "select count(*) from raw.server_metrics m join raw.waves w using (wave_id) "
        "where w.run_id = ? and w.deployment = 'bw' and m.phase = 'during' "
        "and m.name = 'sim:num_requests_running'",
        [run_id],
    )
    # what the queue rules saw, for the failure message: (deployment, streams, peak
    # decoding at once, queued, median tok/s, invalid reasons)
    waves = q(
        db_path,
        "select deployment, concurrency, peak_concurrency, queued, median_decode_tok_s, "
        "invalid_reasons from intermediate.int_trials where run_id = ? "
        "and deployment in ('slots', 'kv') order by 1, 2",
        [run_id],
    )
    unavailable = q(
        db_path,
        "select evidence, unavailable_reason from marts.fct_server_evidence "
        "where run_id = ? and deployment = 'slots' and evidence = 'preemptions' limit 1",
        [run_id],
    )
    assert verdicts["bw"][0] == "memory-bandwidth", verdicts["bw"]
    assert verdicts["slots"][0] == "request-slots", (verdicts["slots"], waves)
    assert verdicts["kv"][0] == "kv-cache", (verdicts["kv"], waves)
    assert verdicts["dip"][0] == "batch-buckets", verdicts["dip"]
    assert verdicts["prefill"][0] == "prefill", verdicts["prefill"]
    # dbt's bound is the simulator's own formula at the measured context, and the measured
    # rate sits at the simulator's efficiency (0.8) of it
    assert len(bounds) == 3
    for streams, context, bound, share in bounds:
        truth = bandwidth_bound_tok_s(BANDWIDTH, streams, context)
        assert bound == pytest.approx(truth, rel=0.01), (streams, bound, truth)
        within("bw: measured / bound", share, 0.7, 0.9, (streams, share))
    # the gauges were sampled while the waves ran (the 16-stream wave lasts seconds)
    assert sampled_during is not None and sampled_during[0] >= 3, sampled_during
    # llama-server publishes no preemption counter: unavailable, with the reason, never 0
    assert unavailable == [("preemptions", "llamacpp publishes no metric for this")]
