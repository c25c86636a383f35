"""The simulator's physics: pure functions of a profile, with no state.

A decode step's weight and KV bytes, the time a step takes, the bandwidth bound the
bottleneck diagnosis must reproduce, and a request's draft acceptance. The engine loop
(``sim.engine``) runs these, and tests and the twin (``sim.fleet``) compute their expected
answers with the same functions.
"""

from __future__ import annotations

from sparkcap.servers.sim.profile import SimProfile


def expected_unique_experts(experts: int, experts_per_token: int, n_tokens: int) -> float:
    """E·(1 − (1 − k/E)^n): the distinct experts per layer a batch of n tokens, each routed to
    k of E uniformly, touches on average; why a MoE step reads more weights at more streams."""
    return experts * (1.0 - (1.0 - experts_per_token / experts) ** n_tokens)


def step_weight_bytes(profile: SimProfile, n_streams: int) -> float:
    """Weight bytes a decode step of ``n_streams`` reads: all of a dense model, a MoE model's
    shared layers plus the experts the batch is expected to touch."""
    if profile.weight_bytes is not None:
        return profile.weight_bytes
    if (
        profile.moe_experts is None
        or profile.moe_experts_per_token is None
        or profile.moe_expert_bytes is None
        or profile.moe_shared_bytes is None
    ):
        raise ValueError(f"{profile.model}: no weight_bytes or moe_* fields declared")
    unique = expected_unique_experts(profile.moe_experts, profile.moe_experts_per_token, n_streams)
    return profile.moe_shared_bytes + unique * profile.moe_expert_bytes


def model_weight_bytes(profile: SimProfile) -> float | None:
    """Bytes of the whole model (every expert), what a GGUF's size says; None: not declared."""
    if profile.weight_bytes is not None:
        return profile.weight_bytes
    if profile.moe_experts is None or profile.moe_expert_bytes is None:
        return None
    return (profile.moe_shared_bytes or 0.0) + profile.moe_experts * profile.moe_expert_bytes


def decode_step_bytes(profile: SimProfile, n_streams: int, context_tokens_total: float) -> float:
    """Bytes one decode step moves: the weights it touches plus the KV of every running
    stream's context (prompt + generated), summed over streams."""
    return step_weight_bytes(profile, n_streams) + context_tokens_total * profile.kv_bytes_per_token


def bandwidth_bound_tok_s(profile: SimProfile, n_streams: int, mean_context_tokens: float) -> float:
    """The truth the bottleneck diagnosis is tested against: the per-stream decode rate,
    tokens/s, that ``n_streams`` at a mean context of ``mean_context_tokens`` cannot exceed
    when every step moves its bytes at the full peak bandwidth (efficiency 1, no drafts, no
    step overhead, no padding). A profile decodes at ``bandwidth_efficiency`` times it when
    ``step_overhead_s`` is 0 and it has no drafts."""
    if profile.memory_bandwidth_gb_s is None:
        raise ValueError(f"{profile.model}: memory_bandwidth_gb_s is not set")
    step_bytes = decode_step_bytes(profile, n_streams, n_streams * mean_context_tokens)
    return profile.memory_bandwidth_gb_s * 1e9 / step_bytes


def base_acceptance(profile: SimProfile, *, is_code: bool, temperature: float) -> float:
    """A request's draft acceptance before its prompt's own shift: the workload's
    (``acceptance_code`` or ``acceptance_prose``) times ``1 − temperature_penalty ×
    temperature``, at least 0. So code at prose's temperature accepts
    ``acceptance_code × (1 − penalty × T_prose)``: the attribution probe's known answer."""
    base = profile.acceptance_code if is_code else profile.acceptance_prose
    return max(0.0, base * (1.0 - profile.temperature_penalty * temperature))


def decode_step_s(profile: SimProfile, n_streams: int, context_tokens_total: float) -> float:
    """Seconds one decode step of ``n_streams`` running streams takes, their contexts (prompt +
    generated) summing to ``context_tokens_total``. The bandwidth model: the step's bytes at
    ``bandwidth_efficiency`` of the peak, plus ``step_overhead_s``; otherwise
    ``step_s1 * (1 + batch_slowdown * (batch - 1)) * (1 + context_slowdown * mean_context / 1000)``.
    Either runs at the padded batch, and a padded step costs ``bucket_pad_slowdown`` more."""
    batch = profile.padded_batch(n_streams)
    if profile.memory_bandwidth_gb_s is not None:
        bytes_per_s = profile.memory_bandwidth_gb_s * 1e9 * profile.bandwidth_efficiency
        step_bytes = decode_step_bytes(profile, batch, context_tokens_total)
        step_s = step_bytes / bytes_per_s + profile.step_overhead_s
    else:
        ctx = context_tokens_total / n_streams
        step_s = (
            profile.step_s1
            * (1 + profile.batch_slowdown * (batch - 1))
            * (1 + profile.context_slowdown * ctx / 1000)
        )
    if batch > n_streams:
        step_s *= 1 + profile.bucket_pad_slowdown
    return step_s
