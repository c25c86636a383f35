"""A context ladder's answer in one line."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkcap.publish.marts import ContextLadderRow


def context_ladder_line(c: ContextLadderRow) -> str:
    """A context ladder's answer in one line: the largest prompt whose first token came within
    the ceiling (cold, then warm), where the ladder stopped meeting it and why, the context
    it climbed to and who reported it."""
    head = f"{c.deployment} context ladder"
    if c.status != "measured":
        return f"{head}: unavailable ({c.status_reason or 'no reason recorded'})"
    ceiling = f"TTFT ≤ {c.ttft_ceiling_s:g} s"

    def tokens(n: int | None) -> str:
        return "none" if n is None else f"{n:,} tokens"

    if c.limited_by == "ttft":
        stop = f"slower from the {c.first_failing_rung:,}-token rung"
    elif c.limited_by == "context":
        stop = f"refused from the {c.refused_rung_tokens:,}-token rung (the context limit)"
    else:
        stop = "every rung met it"
    context = (
        "no context reported"
        if c.context_tokens is None
        else f"context {c.context_tokens:,} ({c.context_source})"
    )
    # a rung whose cold prompt the server served from its cache measured no cold prefill
    not_cold = (
        f"; {c.n_not_cold_rungs} rung(s) served from the cache, not counted as cold"
        if c.n_not_cold_rungs
        else ""
    )
    return (
        f"{head}: largest prompt with {ceiling}: {tokens(c.largest_cold_prompt_tokens)} cold, "
        f"{tokens(c.largest_warm_prompt_tokens)} warm; {stop}; {context}{not_cold}"
    )
