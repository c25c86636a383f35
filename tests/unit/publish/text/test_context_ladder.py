"""A context ladder's line, worded from its summary row."""

from __future__ import annotations

import pytest

from sparkcap.publish.marts import ContextLadderRow
from sparkcap.publish.text.context_ladder import context_ladder_line


def _ladder(**kw: object) -> ContextLadderRow:
    base: dict[str, object] = dict(
        deployment="gemma",
        context_tokens=8192,
        context_source="llama-props",
        ttft_ceiling_s=5.0,
        n_rungs=4,
        n_measured_rungs=4,
        n_not_cold_rungs=0,
        largest_cold_prompt_tokens=2061,
        largest_warm_prompt_tokens=7982,
        first_failing_rung=4096,
        refused_rung_tokens=None,
        limited_by="ttft",
        status="measured",
        status_reason=None,
    )
    return ContextLadderRow(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("row", "line"),
    [
        (
            _ladder(),
            "gemma context ladder: largest prompt with TTFT ≤ 5 s: 2,061 tokens cold, 7,982 "
            "tokens warm; slower from the 4,096-token rung; context 8,192 (llama-props)",
        ),
        (
            _ladder(limited_by="context", first_failing_rung=8000, refused_rung_tokens=8000),
            "gemma context ladder: largest prompt with TTFT ≤ 5 s: 2,061 tokens cold, 7,982 "
            "tokens warm; refused from the 8,000-token rung (the context limit); context 8,192 "
            "(llama-props)",
        ),
        (
            _ladder(
                limited_by="ttft",
                first_failing_rung=1024,
                largest_cold_prompt_tokens=None,
                context_tokens=None,
                context_source="none",
            ),
            "gemma context ladder: largest prompt with TTFT ≤ 5 s: none cold, 7,982 tokens "
            "warm; slower from the 1,024-token rung; no context reported",
        ),
        (
            _ladder(limited_by="none", first_failing_rung=None, ttft_ceiling_s=0.5),
            "gemma context ladder: largest prompt with TTFT ≤ 0.5 s: 2,061 tokens cold, 7,982 "
            "tokens warm; every rung met it; context 8,192 (llama-props)",
        ),
        (
            _ladder(limited_by="none", first_failing_rung=None, n_not_cold_rungs=1),
            "gemma context ladder: largest prompt with TTFT ≤ 5 s: 2,061 tokens cold, 7,982 "
            "tokens warm; every rung met it; context 8,192 (llama-props); 1 rung(s) served "
            "from the cache, not counted as cold",
        ),
        (
            _ladder(
                status="unavailable",
                status_reason="the first rung (8192 tokens) was refused as too long",
            ),
            "gemma context ladder: unavailable (the first rung (8192 tokens) was refused as too "
            "long)",
        ),
    ],
)
def test_a_context_ladder_is_worded_from_its_summary(row: ContextLadderRow, line: str) -> None:
    assert context_ladder_line(row) == line
