"""The waves a plan asks for, in the order a grid measures them (the search builds its own)."""

from __future__ import annotations

from dataclasses import dataclass

from sparkcap.config.plan import SweepPlan


@dataclass(frozen=True, slots=True)
class WavePlanItem:
    concurrency: int
    trial: int
    max_tokens: int | None = None  # None: the plan's
    length_factor: float = 1.0  # times max_tokens (or each stream's own length) ...
    min_tokens: int = 2  # ... but never fewer
    probe: str | None = None  # "sustain" for a search's sustain wave
    method: str = "grid"
    search_step: int | None = None


def plan_waves(plan: SweepPlan) -> list[WavePlanItem]:
    items: list[WavePlanItem] = []
    for level in plan.levels:
        if plan.warmup:
            items.append(WavePlanItem(level, 0))
        items.extend(WavePlanItem(level, t) for t in range(1, plan.trials + 1))
    return items
