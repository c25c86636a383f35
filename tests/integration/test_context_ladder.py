"""The context-ladder probe against the simulator, whose prefill rate, chunking, prefix cache
and context limit are its model's: each figure's truth is computed from the profile."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from sparkcap.config.deployment import Deployment
from sparkcap.config.probes import ContextLadderOptions
from sparkcap.night.sweeps import run_probe
from sparkcap.publish import marts
from sparkcap.publish.text.context_ladder import context_ladder_line
from sparkcap.servers.sim.profile import SimProfile
from sparkcap.servers.sim.server import SimServer
from sparkcap.transform.dbt_build import build, parse_var_overrides
from tests.spread import within
from tests.support.queries import q

# serial (the timing phase): each rung's cold TTFT is held within TTFT_SLACK_S of the model's
# (a simulated server's pace held to a tolerance is a timing test: a starved worker's stall
# would be read as the server's)
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.client_timing]

PREFILL_TOK_S = 4000.0
PREFILL_CHUNK = 2048
STEP_S1 = 0.03
BATCH_SLOWDOWN = 0.1
N_CTX = 6000
CEILING_S = 0.8
# a background request's length: the probe waits out one after its last rung (~30 tok/s here)
BACKGROUND_TOKENS = 48
# the ladder streams' answers: enough for a decode rate, few enough for a quick ladder
ANSWER_TOKENS = 8
# what a measured cold TTFT may exceed the model's by: HTTP, the event loop, a busy machine
TTFT_SLACK_S = 0.2


def predicted_cold_ttft_s(prompt_tokens: int) -> float:
    """The sim's cold TTFT beside two decoding background streams: the prompt's uncached
    tokens at ``prefill_tok_s``, plus one decode step of the running streams in each of its
    ``prefill_chunk`` iterations (two streams, one token each, little context: batch slowdown
    only; the ladder's own earlier stream has ended)."""
    step_s = STEP_S1 * (1 + BATCH_SLOWDOWN * (2 - 1))
    return prompt_tokens / PREFILL_TOK_S + math.ceil(prompt_tokens / PREFILL_CHUNK) * step_s


def test_context_ladder_against_the_simulator(db_path: Path) -> None:
    prof = SimProfile(
        model="m",
        step_s1=STEP_S1,
        batch_slowdown=BATCH_SLOWDOWN,
        context_slowdown=0.0,
        draft_tokens=0,
        prefill_tok_s=PREFILL_TOK_S,
        prefill_chunk=PREFILL_CHUNK,
        n_ctx=N_CTX,
        metric_style="llamacpp",  # so /props reports the per-slot n_ctx the ladder climbs to
    )
    with SimServer([prof]) as sim:
        dep = Deployment(
            name="sim",
            endpoint=sim.endpoint,
            model="m",
            extra_body={"ignore_eos": True},
        )
        run_id = asyncio.run(
            run_probe(
                dep,
                ContextLadderOptions(
                    background_tokens=BACKGROUND_TOKENS, answer_tokens=ANSWER_TOKENS
                ),
                db_path,
            )
        ).run_id
        # declared past the server's n_ctx: the rung over it must be refused, not streamed
        refused_run = asyncio.run(
            run_probe(
                dep,
                ContextLadderOptions(
                    start_tokens=8192,
                    context_tokens=16384,
                    background_tokens=BACKGROUND_TOKENS,
                    answer_tokens=ANSWER_TOKENS,
                ),
                db_path,
            )
        ).run_id
    # the ceiling as `sparkcap build --var` gives it; only the ladder's models and their tests
    # (stg_client_processes: a relationship test of stg_waves needs it)
    build(
        db_path,
        select="+fct_context_ladder_summary stg_client_processes",
        dbt_vars=parse_var_overrides([f"ttft_ceiling_s={CEILING_S}"]),
    )

    rungs = q(
        db_path,
        f"""
        select rung_tokens, cold_prompt_tokens, cold_ttft_s, warm_ttft_s, warm_cached_tokens,
               background_prefill_tok_s, background_outside_tok_s, meets_ceiling, is_refused,
               context_tokens, context_source, cold_cache_state
        from marts.fct_context_ladder where run_id = '{run_id}' order by rung_tokens
        """,
    )
    top = N_CTX - ANSWER_TOKENS - 64 - int(N_CTX * 0.02)  # answer, template and sizing room
    assert [r[0] for r in rungs] == [1024, 2048, 4096, top]
    assert {(r[9], r[10]) for r in rungs} == {(N_CTX, "llama-props")}
    # every cold prompt a never-seen document: the server's own count says it found it cold
    assert {r[11] for r in rungs} == {"cold"}
    for rung, tokens, cold, warm, cached, bg_prefill, bg_outside, meets, refused, *_ in rungs:
        assert isinstance(tokens, int) and isinstance(rung, int)
        assert abs(tokens - rung) <= max(16, rung // 100) + 20
        truth = predicted_cold_ttft_s(tokens)
        # below the model by up to one decode step: a background stream restarting just then
        # leaves a chunk's iteration with one stream, or none, decoding beside it
        assert isinstance(cold, float)
        within("cold TTFT - model's, s", cold - truth, -0.04, TTFT_SLACK_S, (rung, cold, truth))
        # the same document again: only the blocks past the cache's last full one prefill.
        # The model's worst warm TTFT: the uncached tail (under two 64-token blocks) at the
        # prefill rate, an iteration in progress to wait out and its own (0.032 + 2 x 0.033 s),
        # plus HTTP and the event loop. The bound is the model's, not a share of the cold TTFT:
        # `warm < cold / 3` lies under the model's own truth at the 1024 rung (cold 0.277 s,
        # warm up to ~0.104 s)
        warm_max_s = 128 / PREFILL_TOK_S + 2 * STEP_S1 * (1 + BATCH_SLOWDOWN) + 0.05
        assert isinstance(warm, float) and warm < cold, (rung, warm, cold)
        within("warm TTFT / its model's worst", warm / warm_max_s, high=1.0, context=(rung, warm))
        # all of the document's full 64-token blocks, but the question after it differs: the
        # block it begins in is the first not cached
        assert isinstance(cached, int) and tokens - 128 <= cached < tokens
        assert meets is (cold <= CEILING_S) and refused is False
        # one token per stream per prefill iteration against one per step outside
        assert isinstance(bg_prefill, float) and isinstance(bg_outside, float)
        assert bg_prefill < 0.5 * bg_outside, (rung, bg_prefill, bg_outside)
    predicted_largest = max(
        int(str(r[1])) for r in rungs if predicted_cold_ttft_s(int(str(r[1]))) <= CEILING_S
    )
    summary = q(
        db_path,
        f"""
        select context_tokens, largest_cold_prompt_tokens, largest_warm_prompt_tokens,
               first_failing_rung, limited_by, status, ttft_ceiling_s, n_not_cold_rungs
        from marts.fct_context_ladder_summary where run_id = '{run_id}'
        """,
    )
    largest_warm = q(
        db_path,
        f"select max(warm_prompt_tokens) from marts.fct_context_ladder where run_id = '{run_id}'",
    )[0][0]
    assert summary == [(N_CTX, predicted_largest, largest_warm, 4096, "ttft", "measured", 0.8, 0)]

    assert q(
        db_path,
        f"""
        select s.status, s.status_reason, l.is_refused, l.rung_tokens
        from marts.fct_context_ladder_summary s join marts.fct_context_ladder l using (wave_id)
        where s.run_id = '{refused_run}'
        """,
    ) == [("unavailable", "the first rung (8192 tokens) was refused as too long", True, 8192)]

    (ladder,) = marts.context_ladders(db_path, run_id)
    assert context_ladder_line(ladder) == (
        f"sim context ladder: largest prompt with TTFT ≤ 0.8 s: {predicted_largest:,} tokens "
        f"cold, {largest_warm:,} tokens warm; slower from the 4,096-token rung; "
        f"context {N_CTX:,} (llama-props)"
    )
