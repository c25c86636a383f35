"""An engine profile: the fields that make one simulated deployment behave as it does.

Each field's description says what it changes; ``sim.engine`` says how the parts combine into
the served model, and ``sim.physics`` holds the formulas that read them. :class:`SimFaults`
are misbehaviour switches, off unless set.
"""

from __future__ import annotations

import itertools
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MetricStyle = Literal["sim", "vllm", "sglang", "llamacpp", "tgi", "trtllm"]


class SimFaults(BaseModel):
    """Misbehaviour switches; each applies to requests ``i`` with ``i % every == every - 1``."""

    model_config = ConfigDict(extra="forbid")

    every: int = Field(1, ge=1)
    short_output_tokens: int | None = Field(
        None, ge=1, description="end with finish_reason=stop after this many tokens"
    )
    cut_after_tokens: int | None = Field(None, ge=0, description="drop the connection")
    end_without_done_after_tokens: int | None = Field(
        None, ge=0, description="end cleanly, no [DONE], no finish_reason"
    )
    error_after_tokens: int | None = Field(None, ge=0, description="in-band error event")
    stall_after_tokens: int | None = Field(None, ge=0, description="stop sending, keep open")
    trickle_interval_s: float | None = Field(None, gt=0, description="one token per interval")
    reject_status: Literal[429, 503] | None = None
    retry_after_s: int = 7
    omit_usage: bool = False


class SimProfile(BaseModel):
    """One simulated deployment (the twin's: :func:`bandwidth_calibrated` in ``sim.fleet``)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    step_s1: float = Field(0.05, gt=0, description="decode iteration at batch 1, seconds")
    batch_slowdown: float = Field(0.2, ge=0)
    context_slowdown: float = Field(0.03, ge=0, description="per 1000 tokens of mean context")
    draft_tokens: int = Field(3, ge=0)
    acceptance_code: float = Field(0.8, ge=0, le=0.99)
    acceptance_prose: float = Field(0.6, ge=0, le=0.99)
    temperature_penalty: float = Field(0.0, ge=0, le=1)
    prompt_acceptance_spread: float = Field(0.04, ge=0, le=0.5)
    acceptance_noise: Literal["geometric", "low"] = Field(
        "geometric",
        description="geometric: drafts accepted one by one; low: the same mean tokens per step "
        "with the least variance (stable headline numbers from short demo outputs)",
    )
    fixed_chunk_tokens: int | None = Field(None, ge=1)
    reasoning_tokens: int = Field(
        0,
        ge=0,
        description="a thinking model: each stream's first this many tokens are reasoning, "
        "streamed in reasoning_field and counted in usage's completion_tokens_details, unless "
        "the request turns thinking off (chat_template_kwargs.enable_thinking false)",
    )
    reasoning_field: Literal["reasoning_content", "reasoning"] = Field(
        "reasoning_content",
        description="the delta field reasoning arrives in: vLLM's older reasoning_content or "
        "its 2025 reasoning (llama-server and SGLang send reasoning_content)",
    )
    prefill_tok_s: float = Field(4000.0, gt=0)
    prefill_chunk: int = Field(2048, ge=1)
    max_slots: int = Field(256, ge=1)
    prefix_cache: bool = True
    cache_block_tokens: int = Field(64, ge=1)
    cache_capacity_tokens: int = Field(1_000_000, ge=0)
    stream_interval_tokens: int = Field(
        1,
        ge=1,
        le=64,
        description="tokens held until at least this many are unsent, then sent as one chunk "
        "(and the rest at the finish), the first chunk included: vLLM's --stream-interval and "
        "buffering proxies, whose first k - 1 tokens no chunk interval times",
    )
    batch_buckets: list[int] | None = Field(
        None,
        description="batch sizes a decode step runs at (ascending): n streams cost a step of "
        "the smallest bucket >= n (n itself past the largest), like vLLM's CUDA-graph capture "
        "sizes, which pad 5 streams to 8 and 10 to 16; None: every n runs at n",
    )
    bucket_pad_slowdown: float = Field(
        0.0,
        ge=0,
        description="a padded step (n below its bucket) costs (1 + this) times the bucket's "
        "step: the 17-25 % dips reported on DGX Spark at padded sizes, so that a level just "
        "past a bucket edge is slower than the bucket itself",
    )
    memory_bandwidth_gb_s: float | None = Field(
        None,
        gt=0,
        description="peak memory bandwidth, GB/s: when set, a decode step takes the time its "
        "bytes (weights it touches + every running stream's KV) need at "
        "bandwidth_efficiency of it, plus step_overhead_s, instead of the step_s1 formula",
    )
    bandwidth_efficiency: float = Field(
        0.8, gt=0, le=1, description="share of the peak bandwidth a decode step achieves"
    )
    weight_bytes: float | None = Field(
        None, gt=0, description="dense model: the weight bytes every decode step reads"
    )
    moe_experts: int | None = Field(None, ge=1, description="MoE: routed experts per layer (E)")
    moe_experts_per_token: int | None = Field(
        None, ge=1, description="MoE: experts each token is routed to (k)"
    )
    moe_expert_bytes: float | None = Field(
        None, gt=0, description="MoE: bytes of one routed expert summed over all MoE layers"
    )
    moe_shared_bytes: float | None = Field(
        None,
        ge=0,
        description="MoE: bytes every step reads whatever the routing (attention, embeddings, "
        "shared experts)",
    )
    kv_bytes_per_token: float = Field(
        0.0, ge=0, description="KV cache bytes one token of context holds (read every step)"
    )
    step_overhead_s: float = Field(
        0.0, ge=0, description="bandwidth model: fixed time per decode step (launches, sampling)"
    )
    kv_capacity_tokens: int | None = Field(
        None,
        ge=1,
        description="tokens of context the KV cache holds across admitted requests: past it "
        "the most recently admitted request is preempted and later recomputed (vLLM's "
        "recompute preemption); None: unbounded",
    )
    n_ctx: int = Field(32768, ge=1, description="context one request may fill (/props, models)")
    cache_reset: Literal["works", "ignored", "absent"] = Field(
        "works",
        description="POST /reset_prefix_cache: drops the prefix cache (vLLM), answers 200 and "
        "forgets nothing (a broken route the verification must catch), or is not served",
    )
    n_params: int | None = Field(
        None, ge=1, description="parameters, for llama-server's /v1/models meta (default: none)"
    )
    n_embd: int = Field(4096, ge=1, description="embedding width, for llama-server's meta")
    metric_style: MetricStyle = Field(
        "sim",
        description="whose /metrics names and /v1/models facts the server shows for this "
        "deployment: the simulator's own, or vLLM's, SGLang's, llama-server's, TGI's, "
        "TensorRT-LLM's",
    )
    idle_power_w: float = Field(
        60.0, ge=0, le=1e4, description="the GPU's draw with no request admitted (/dcgm/metrics)"
    )
    power_per_stream_w: float = Field(
        15.0, ge=0, le=1e4, description="the draw each admitted request adds (/dcgm/metrics)"
    )
    engine_version: str = Field(
        "sim-1",
        min_length=1,
        max_length=80,
        description="the engine's version its server reports: vLLM-style GET /version, "
        "llama-server-style /props build_info (as b<N>-<hash>), for change detection",
    )
    seed: int = 0
    faults: SimFaults = Field(default_factory=lambda: SimFaults())

    @model_validator(mode="after")
    def _one_weight_model(self) -> SimProfile:
        moe = (
            self.moe_experts,
            self.moe_experts_per_token,
            self.moe_expert_bytes,
            self.moe_shared_bytes,
        )
        if any(v is not None for v in moe) and any(v is None for v in moe):
            raise ValueError(
                "moe_experts, moe_experts_per_token, moe_expert_bytes and moe_shared_bytes "
                "are declared together"
            )
        is_moe = self.moe_experts is not None
        if is_moe and self.weight_bytes is not None:
            raise ValueError("declare weight_bytes (dense) or the moe_* fields, not both")
        if (
            self.moe_experts is not None
            and self.moe_experts_per_token is not None
            and self.moe_experts_per_token > self.moe_experts
        ):
            raise ValueError("moe_experts_per_token cannot exceed moe_experts")
        if self.memory_bandwidth_gb_s is not None and not is_moe and self.weight_bytes is None:
            raise ValueError("memory_bandwidth_gb_s needs weight_bytes or the moe_* fields")
        return self

    @field_validator("batch_buckets")
    @classmethod
    def _ascending_buckets(cls, v: list[int] | None) -> list[int] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("batch_buckets must name at least one size (or be left out)")
        if any(b < 1 for b in v):
            raise ValueError(f"batch_buckets must be positive, got {v}")
        if any(a >= b for a, b in itertools.pairwise(v)):
            raise ValueError(f"batch_buckets must be strictly ascending, got {v}")
        return v

    def padded_batch(self, n_streams: int) -> int:
        """The batch a step of ``n_streams`` runs at: its bucket, or itself past the last."""
        for bucket in self.batch_buckets or ():
            if bucket >= n_streams:
                return bucket
        return n_streams
