"""The study's two workloads, built into concrete per-stream requests.

Prompts are shipped with the package (16 Python tasks, 16 writing topics). Every stream in a
wave gets a distinct prompt; beyond 16 streams a prompt is reused with a variant suffix so the
text stays distinct. A per-wave tag at the start of each prompt keeps prompts uncached across
waves and trials, so that TTFT measures a real prefill rather than a prefix-cache hit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

CODE_TOKENS = 1000
PROSE_MIN_TOKENS = 300
PROSE_MAX_TOKENS = 600


@dataclass(frozen=True, slots=True)
class StreamSpec:
    prompt_id: str
    messages: tuple[dict[str, str], ...]
    max_tokens: int
    temperature: float
    # the output length this stream stands in for when a search shortens (or a sustain wave
    # lengthens) it: dbt judges a shortened stream as that full-length one (None: its own)
    full_tokens: int | None = None


@cache
def _catalogue() -> dict[str, Any]:
    text = files("sparkcap").joinpath("data/workloads.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def prompts(workload: str) -> list[str]:
    return list(_catalogue()[workload]["prompts"])


def temperature(workload: str) -> float:
    return float(_catalogue()[workload]["temperature"])


def required_length(workload: str, prompt_index: int) -> int:
    """Code asks 1000 tokens; prose a deterministic 300..600 spread over the 16 topics."""
    if workload == "code":
        return CODE_TOKENS
    n = len(prompts(workload))
    i = prompt_index % n
    return PROSE_MIN_TOKENS + round(i * (PROSE_MAX_TOKENS - PROSE_MIN_TOKENS) / (n - 1))


def build_streams(
    workload: str,
    concurrency: int,
    wave_tag: str,
    max_tokens: int | None = None,
    length_factor: float = 1.0,
    min_tokens: int = 2,
) -> list[StreamSpec]:
    """``length_factor`` scales every stream's length, to no less than ``min_tokens`` (a
    search's trials ask a share of it, its sustain wave a multiple)."""
    cat = _catalogue()[workload]
    texts: list[str] = cat["prompts"]
    n = len(texts)
    out: list[StreamSpec] = []
    for i in range(concurrency):
        base = i % n
        variant = i // n
        prompt_id = f"{workload}-{base + 1:02d}" + (f"~{variant + 1}" if variant else "")
        body = texts[base]
        if variant:
            body += f" (Variant {variant + 1}: choose a different approach than usual.)"
        content = f"[{wave_tag}/{i}] {body}"
        full = max_tokens or required_length(workload, base)
        out.append(
            StreamSpec(
                prompt_id=prompt_id,
                messages=(
                    {"role": "system", "content": cat["system"]},
                    {"role": "user", "content": content},
                ),
                max_tokens=max(min_tokens, round(length_factor * full)),
                temperature=float(cat["temperature"]),
                full_tokens=None if length_factor == 1.0 else full,
            )
        )
    return out
