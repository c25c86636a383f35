"""A deployment's declared facts (the bottleneck diagnosis's bound) are checked where the
fleet file is read."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from sparkcap.config.facts import ModelFacts


@pytest.mark.parametrize(
    ("facts", "why"),
    [
        ({"memory_bandwidth_gb_s": True}, "not true/false"),  # YAML's `true` is no 1 GB/s
        (
            {
                "moe": {
                    "experts": True,
                    "experts_per_token": 1,
                    "expert_bytes": 1,
                    "shared_bytes": 0,
                }
            },
            "not true/false",
        ),
        ({"weight_bytes": float("nan")}, "weight_bytes"),
        ({"weight_bytes": 3e15}, "weight_bytes"),
        (
            {
                "weight_bytes": 1e9,
                "moe": {"experts": 8, "experts_per_token": 2, "expert_bytes": 1, "shared_bytes": 0},
            },
            "not both",
        ),
        (
            {"moe": {"experts": 8, "experts_per_token": 9, "expert_bytes": 1, "shared_bytes": 0}},
            "cannot exceed",
        ),
        ({"layers": 18, "kv_heads": 1}, "together"),
        ({"kv_bytes_per_token": 10.0, "layers": 1, "kv_heads": 1, "head_dim": 1}, "not both"),
    ],
)
def test_impossible_facts_are_refused_with_their_reason(facts: dict[str, Any], why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        ModelFacts(**facts)


def test_kv_bytes_per_token_from_the_model_shape() -> None:
    # Gemma 3 270M: 18 layers, 1 KV head of 256 dims, K and V, fp16
    assert ModelFacts(layers=18, kv_heads=1, head_dim=256).kv_bytes() == 18 * 256 * 2 * 2
    assert ModelFacts(kv_bytes_per_token=1234.0).kv_bytes() == 1234.0
    assert ModelFacts().kv_bytes() is None
