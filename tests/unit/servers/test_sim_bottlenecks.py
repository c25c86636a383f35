"""The simulator's known truths for the bottleneck diagnosis, in model time.

A diagnosis is only testable against a server whose truth is known: a bandwidth-bound decode
whose rate is exactly its efficiency times the physical bound (dense and MoE), a KV cache that
preempts at the level whose context exceeds it and not below, and draft acceptance that
follows workload and temperature by a stated rule.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sparkcap.servers.sim.engine import Engine, SimRequest
from sparkcap.servers.sim.fleet import expected_tokens_per_step
from sparkcap.servers.sim.physics import (
    bandwidth_bound_tok_s,
    base_acceptance,
    expected_unique_experts,
    step_weight_bytes,
)
from sparkcap.servers.sim.profile import SimProfile
from tests.support.sims import clockwork_profile

GB10_GB_S = 273.0
EFFICIENCY = 0.8
PROMPT_TOKENS = 1000
OUTPUT_TOKENS = 60
MEAN_CONTEXT = PROMPT_TOKENS + OUTPUT_TOKENS / 2  # over the decode steps, context P + 1 .. P + T-1


def _bandwidth_profile(**kw: object) -> SimProfile:
    base: dict[str, object] = dict(
        model="m",
        memory_bandwidth_gb_s=GB10_GB_S,
        bandwidth_efficiency=EFFICIENCY,
        draft_tokens=0,
        prefill_tok_s=1e12,
        prefill_chunk=1_000_000,  # every prompt prefilled in the first iteration
    )
    base.update(kw)
    return SimProfile(**base)


def _prompt(i: int, tokens: int) -> str:
    """A prompt of exactly ``tokens`` tokens (4 characters each), distinct from the first block."""
    return f"{i:04d}" + "y" * (4 * tokens - 4)


def _requests(
    n: int, prompt_tokens: int, output_tokens: int, temperature: float = 0.0
) -> list[SimRequest]:
    return [
        SimRequest(f"r{i}", _prompt(i, prompt_tokens), output_tokens, temperature, 0, True, i)
        for i in range(n)
    ]


def _study_rates(profile: SimProfile, reqs: list[SimRequest]) -> dict[str, float]:
    """Each stream's (tokens − 1) / (last send − first send), model time."""
    sent = Engine(profile).schedule(reqs)
    rates = {}
    for req in reqs:
        tok = [s for s in sent if s.request_id == req.request_id and s.emit.kind == "tokens"]
        n = sum(s.emit.n_tokens for s in tok)
        assert n == req.max_tokens
        rates[req.request_id] = (n - 1) / (tok[-1].t_s - tok[0].t_s)
    return rates


# -- bandwidth ---------------------------------------------------------------------------------


def test_a_dense_stream_decodes_at_its_efficiency_times_the_bound() -> None:
    weights, kv = 10e9, 200e3
    profile = _bandwidth_profile(weight_bytes=weights, kv_bytes_per_token=kv)
    for n in (1, 4, 8):
        bound = bandwidth_bound_tok_s(profile, n, MEAN_CONTEXT)
        # the bound by hand: the peak bandwidth over the bytes a step moves
        assert bound == pytest.approx(GB10_GB_S * 1e9 / (weights + n * MEAN_CONTEXT * kv))
        rates = _study_rates(profile, _requests(n, PROMPT_TOKENS, OUTPUT_TOKENS))
        for rate in rates.values():
            assert rate == pytest.approx(EFFICIENCY * bound, rel=0.02)
    # more streams, more KV read per step: each stream is slower
    assert bandwidth_bound_tok_s(profile, 8, MEAN_CONTEXT) < bandwidth_bound_tok_s(
        profile, 1, MEAN_CONTEXT
    )


def test_a_moe_stream_reads_the_experts_its_batch_touches() -> None:
    experts, per_token, expert_b, shared_b = 128, 8, 0.1e9, 2e9
    profile = _bandwidth_profile(
        moe_experts=experts,
        moe_experts_per_token=per_token,
        moe_expert_bytes=expert_b,
        moe_shared_bytes=shared_b,
    )
    by_hand = {
        n: shared_b + experts * (1 - (1 - per_token / experts) ** n) * expert_b for n in (1, 8)
    }
    assert by_hand[1] == pytest.approx(shared_b + per_token * expert_b)  # one token: k experts
    measured = {}
    for n in (1, 8):
        assert step_weight_bytes(profile, n) == pytest.approx(by_hand[n])
        bound = bandwidth_bound_tok_s(profile, n, MEAN_CONTEXT)
        assert bound == pytest.approx(GB10_GB_S * 1e9 / by_hand[n])
        rates = _study_rates(profile, _requests(n, PROMPT_TOKENS, OUTPUT_TOKENS))
        for rate in rates.values():
            assert rate == pytest.approx(EFFICIENCY * bound, rel=0.02)
        measured[n] = min(rates.values())
    # eight streams touch ~52 of 128 experts, not 64: the rate falls by that ratio
    assert expected_unique_experts(experts, per_token, 8) == pytest.approx(51.62, abs=0.01)
    assert measured[1] / measured[8] == pytest.approx(by_hand[8] / by_hand[1], rel=0.02)


def test_step_overhead_and_accepted_drafts_act_on_the_bandwidth_step() -> None:
    weights = 5e9
    plain = _bandwidth_profile(weight_bytes=weights)
    step_s = weights / (GB10_GB_S * 1e9 * EFFICIENCY)
    (rate,) = _study_rates(plain, _requests(1, 10, OUTPUT_TOKENS)).values()
    assert rate == pytest.approx(1 / step_s, rel=0.02)
    slow = _bandwidth_profile(weight_bytes=weights, step_overhead_s=0.01)
    (rate,) = _study_rates(slow, _requests(1, 10, OUTPUT_TOKENS)).values()
    assert rate == pytest.approx(1 / (step_s + 0.01), rel=0.02)
    # a step emitting 2 tokens per stream costs the same bytes: twice the rate
    drafted = _bandwidth_profile(weight_bytes=weights, draft_tokens=1, fixed_chunk_tokens=2)
    (rate,) = _study_rates(drafted, _requests(1, 10, OUTPUT_TOKENS + 1)).values()
    assert rate == pytest.approx(2 / step_s, rel=0.02)


def test_the_bandwidth_model_needs_one_weight_model() -> None:
    with pytest.raises(ValidationError, match="needs weight_bytes"):
        _bandwidth_profile()
    with pytest.raises(ValidationError, match="declared together"):
        _bandwidth_profile(moe_experts=8, moe_experts_per_token=2)
    with pytest.raises(ValidationError, match="not both"):
        _bandwidth_profile(
            weight_bytes=1e9,
            moe_experts=8,
            moe_experts_per_token=2,
            moe_expert_bytes=1e8,
            moe_shared_bytes=1e9,
        )
    with pytest.raises(ValidationError, match="cannot exceed"):
        _bandwidth_profile(
            moe_experts=2, moe_experts_per_token=4, moe_expert_bytes=1e8, moe_shared_bytes=1e9
        )
    with pytest.raises(ValueError, match="memory_bandwidth_gb_s"):
        bandwidth_bound_tok_s(SimProfile(model="m"), 1, 100.0)


# -- KV capacity -------------------------------------------------------------------------------

KV_PROMPT, KV_OUTPUT = 100, 100
KV_CAPACITY = 5 * (KV_PROMPT + KV_OUTPUT)  # five full streams fit exactly, six do not


def _kv_profile(**kw: object) -> SimProfile:
    fields: dict[str, object] = dict(prefill_tok_s=20_000, kv_capacity_tokens=KV_CAPACITY)
    return clockwork_profile(0.01, **{**fields, **kw})


def _run(profile: SimProfile, n: int) -> tuple[Engine, dict[str, float]]:
    engine = Engine(profile)
    reqs = _requests(n, KV_PROMPT, KV_OUTPUT)
    sent = engine.schedule(reqs)
    rates = {}
    for req in reqs:
        tok = [s for s in sent if s.request_id == req.request_id and s.emit.kind == "tokens"]
        assert sum(s.emit.n_tokens for s in tok) == KV_OUTPUT  # a preempted stream still ends
        rates[req.request_id] = (KV_OUTPUT - 1) / (tok[-1].t_s - tok[0].t_s)
    return engine, rates


def test_kv_preempts_at_the_level_whose_context_exceeds_capacity_and_not_below() -> None:
    engine, rates = _run(_kv_profile(), 5)  # 5 × 200 = 1000 tokens: exactly the capacity
    assert engine.preemptions_total == 0
    assert max(rates.values()) == pytest.approx(min(rates.values()))
    engine, rates = _run(_kv_profile(), 6)  # 1200 tokens of context against 1000
    assert engine.preemptions_total == 1  # once: readmitted when the others have finished
    # the latest admitted stream is the one preempted: it stalls while the others run
    victim = rates.pop("r5")
    assert victim < 0.8 * min(rates.values())  # ~66 tokens in, it waits ~34 steps
    assert engine.kv_used_tokens() == 0 and engine.kv_usage() == 0.0
    # without a capacity the same level never preempts
    engine, _ = _run(_kv_profile(kv_capacity_tokens=None), 6)
    assert engine.preemptions_total == 0


def test_kv_usage_is_the_share_of_capacity_held() -> None:
    engine = Engine(_kv_profile())
    engine.running = _requests(3, KV_PROMPT, KV_OUTPUT)
    for req in engine.running:
        req.prompt_tokens, req.generated = KV_PROMPT, 50
    assert engine.kv_used_tokens() == 3 * 150
    assert engine.kv_usage() == pytest.approx(450 / KV_CAPACITY)


# -- acceptance --------------------------------------------------------------------------------


def test_acceptance_follows_workload_and_temperature() -> None:
    profile = SimProfile(
        model="m",
        step_s1=0.01,
        draft_tokens=4,
        acceptance_code=0.9,
        acceptance_prose=0.5,
        temperature_penalty=0.3,
        prompt_acceptance_spread=0.0,
        acceptance_noise="low",
        prefill_tok_s=1e9,
    )
    prose_t = 0.7
    code_at_prose_t = base_acceptance(profile, is_code=True, temperature=prose_t)
    assert code_at_prose_t == pytest.approx(0.9 * (1 - 0.3 * 0.7))
    assert base_acceptance(profile, is_code=True, temperature=0.0) == pytest.approx(0.9)
    assert base_acceptance(profile, is_code=False, temperature=prose_t) == pytest.approx(
        0.5 * (1 - 0.3 * 0.7)
    )
    assert base_acceptance(profile, is_code=False, temperature=10.0) == 0.0  # never negative
    # the engine applies it: code prompts at prose's temperature decode that many tokens a step
    engine = Engine(profile)
    reqs = [
        SimRequest(f"r{i}", f"write python code {i}", 400, prose_t, 0, True, i) for i in range(4)
    ]
    sent = engine.schedule(reqs)
    assert all(r.acceptance == pytest.approx(code_at_prose_t) for r in reqs)
    decode = [s.emit.n_tokens for s in sent if s.emit.kind == "tokens"][len(reqs) :]
    expected = expected_tokens_per_step(code_at_prose_t, 4)
    assert sum(decode) / len(decode) == pytest.approx(expected, rel=0.03)
    assert engine.spec_accept_length() == pytest.approx(expected, rel=0.05)
    assert 1 + engine.accepted_total / (engine.drafted_total / 4) == pytest.approx(
        expected, rel=0.03
    )


# -- queue time --------------------------------------------------------------------------------


def test_queue_time_is_admission_minus_arrival_in_model_time() -> None:
    profile = clockwork_profile(0.01, max_slots=1)
    engine = Engine(profile)
    reqs = _requests(2, 10, 20)
    sent = engine.schedule(reqs)
    first_done = max(s.t_s for s in sent if s.request_id == "r0")
    assert engine.queue_time_s.count == 2
    assert engine.queue_time_s.sum == pytest.approx(first_done)  # r0 waited 0, r1 all of r0
    assert engine.ttft_s.count == 2 and engine.finished_total == 2
    assert engine.request_generation_tokens.sum == 40
