"""What a deployment declares about the memory traffic of its decode steps.

A decode step at ``c`` streams reads the weights the step touches plus every stream's KV cache;
at a per-stream target of 20 tok/s a step has 50 ms, so a node's memory bandwidth caps what can
move per step. These facts let dbt set each measured level beside that physical bound
(``int_level_bounds``). Each is optional: what a fleet file leaves out may be discovered from
the server (llama-server ``/props`` and ``/v1/models``, GGUF metadata, vLLM ``/v1/models``),
and a bound missing a fact is reported as not computable, never guessed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

EngineName = Literal["vllm", "sglang", "llamacpp", "tgi", "trtllm", "sim"]
# a byte count above a petabyte is a typo (or an exponent gone wrong), not a model
MAX_BYTES = 1e15


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans(cls, v: Any) -> Any:
        # no fact is a yes/no: YAML's `true` would otherwise pass as the number 1
        if isinstance(v, bool):
            raise ValueError("a number or text is expected here, not true/false")
        return v


class MoEFacts(_Strict):
    """A mixture-of-experts model: a batch of ``c`` streams touches, per MoE layer, the expected
    E·(1 − (1 − k/E)^c) distinct experts of E, each token routed to k of them."""

    experts: int = Field(ge=1, le=4096, description="routed experts per MoE layer (E)")
    experts_per_token: int = Field(ge=1, le=4096, description="experts each token is routed to")
    expert_bytes: float = Field(
        gt=0, le=MAX_BYTES, description="bytes of one routed expert summed over all MoE layers"
    )
    shared_bytes: float = Field(
        ge=0,
        le=MAX_BYTES,
        description="bytes every step reads whatever the routing: attention, embeddings, "
        "norms, shared experts",
    )

    @model_validator(mode="after")
    def _k_within_e(self) -> MoEFacts:
        if self.experts_per_token > self.experts:
            raise ValueError("experts_per_token cannot exceed experts")
        return self


class ModelFacts(_Strict):
    """Declared facts of one deployment (the fleet file's ``facts:``)."""

    engine: EngineName | None = Field(
        None, description="whose /metrics names to read; None: told by the names themselves"
    )
    memory_bandwidth_gb_s: float | None = Field(
        None,
        gt=0,
        le=1e6,
        description="memory bandwidth of one node, GB/s (GB10: 273 nominal, ~232 measured read)",
    )
    memory_bandwidth_basis: Literal["nominal", "measured"] | None = Field(
        None,
        description="what memory_bandwidth_gb_s is: the data sheet's (nominal) or a measured "
        "read bandwidth; a bound at a nominal bandwidth is said to be one, since a decode step "
        "never reads at the nominal rate (GB10: 273 GB/s nominal, 231-234 GB/s measured)",
    )
    nodes_per_replica: int | None = Field(
        None, ge=1, le=4096, description="nodes one replica spans (default: nodes / replicas)"
    )
    weight_bytes: float | None = Field(
        None, gt=0, le=MAX_BYTES, description="dense model: the weight bytes every step reads"
    )
    moe: MoEFacts | None = None
    kv_bytes_per_token: float | None = Field(
        None, gt=0, le=1e9, description="KV cache bytes one token of context holds"
    )
    layers: int | None = Field(None, ge=1, le=10_000)
    kv_heads: int | None = Field(None, ge=1, le=10_000)
    head_dim: int | None = Field(None, ge=1, le=100_000)
    kv_dtype_bytes: float = Field(2.0, gt=0, le=8, description="bytes per KV element (fp16: 2)")
    context_tokens: int | None = Field(
        None, ge=1, le=1 << 24, description="the context one request may fill"
    )
    gguf_path: Path | None = Field(
        None, description="the served GGUF file on this host, whose metadata names the rest"
    )

    @model_validator(mode="after")
    def _one_weight_model(self) -> ModelFacts:
        if self.memory_bandwidth_basis is not None and self.memory_bandwidth_gb_s is None:
            raise ValueError("memory_bandwidth_basis describes memory_bandwidth_gb_s: give both")
        if self.weight_bytes is not None and self.moe is not None:
            raise ValueError("declare weight_bytes (dense) or moe, not both")
        shape = (self.layers, self.kv_heads, self.head_dim)
        if self.kv_bytes_per_token is not None and any(v is not None for v in shape):
            raise ValueError("declare kv_bytes_per_token or layers/kv_heads/head_dim, not both")
        if any(v is not None for v in shape) and any(v is None for v in shape):
            raise ValueError("layers, kv_heads and head_dim are declared together")
        return self

    def kv_bytes(self) -> float | None:
        """KV bytes per token: declared, or layers × KV heads × head dim × 2 (K and V) × dtype."""
        if self.kv_bytes_per_token is not None:
            return self.kv_bytes_per_token
        if self.layers is None or self.kv_heads is None or self.head_dim is None:
            return None
        return float(self.layers * self.kv_heads * self.head_dim * 2 * self.kv_dtype_bytes)
