"""An adaptive search for the largest integer concurrency whose median stream passes.

MLPerf LoadGen's peak search doubles then bisects; sparkcap does the same, but a level is
measured only until its answer is known: after each counted trial a *judge* (injected;
``sparkcap.transform.live_judge`` runs dbt's ``search_level_interval`` macro on the live figures)
returns the bootstrap interval of the level median, and the level stops as soon as that
interval clears the threshold, or at ``trials_max`` (the level then *straddles* it and the
answer becomes an interval). A level's direction is its median, as in the grid's rule; a
sustain wave at the found capacity, longer than the trials, confirms it or moves it down.

This module decides which wave comes next; it records every decision on the wave it was made
after (``SearchDecision``) and judges nothing itself. The capacity of record is dbt's.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sparkcap.config.deployment import Deployment
from sparkcap.config.plan import SearchPlan, SweepPlan
from sparkcap.loadgen.plan import WavePlanItem
from sparkcap.loadgen.records import SearchDecision, WaveRecord


class WaveRunner(Protocol):
    """What the search measures through (``loadgen.sweep.WaveRunner``, the grid's runner too)."""

    run_id: str
    deployment: Deployment
    workload: str
    plan: SweepPlan

    async def measure(
        self, item: WavePlanItem, decide: Callable[[WaveRecord], Awaitable[None]] | None = None
    ) -> WaveRecord: ...


@dataclass(frozen=True, slots=True)
class LevelJudgement:
    """The judge's answer for a level (or a sustain wave) from the waves measured so far."""

    n_valid_trials: int
    median_tok_s: float | None
    ci_low_tok_s: float | None
    ci_high_tok_s: float | None
    verdict: str  # pass | fail | straddles
    passes_median: bool  # the grid's rule on the median: the search's direction
    why: str | None = None  # a verdict the interval did not give (e.g. queued streams)
    # fewer stream rates than an interval needs (dbt's search_level_interval says): the
    # verdict is "straddles", but there is no interval to straddle
    too_few_stream_rates: bool = False


# (level key, counted waves of the level, confidence) -> judgement
Judge = Callable[[str, Sequence[WaveRecord], float], Awaitable[LevelJudgement]]


class Bisection:
    """Which level next: 1, 2, 4, … until one fails (or ``max_level``), then halve the gap
    between the largest passing and the smallest failing level until they are adjacent."""

    def __init__(self, max_level: int) -> None:
        self.max_level = max_level
        self.largest_pass = 0
        self.smallest_fail: int | None = None

    def next_level(self) -> int | None:
        lo, hi = self.largest_pass, self.smallest_fail
        if hi is None:
            if lo >= self.max_level:
                return None
            return 1 if lo == 0 else min(2 * lo, self.max_level)
        if hi - lo <= 1:
            return None
        return (lo + hi) // 2

    def record(self, level: int, passes: bool) -> None:
        if passes:
            self.largest_pass = max(self.largest_pass, level)
        else:
            hi = self.smallest_fail
            self.smallest_fail = level if hi is None else min(hi, level)

    @property
    def capacity(self) -> int:
        return self.largest_pass


def level_key(run_id: str, deployment: str, workload: str, concurrency: int, kind: str) -> str:
    """The key the judge's bootstrap hashes; int_search_levels builds the same one, so live
    and recorded intervals of the same waves are identical."""
    return f"{run_id}/{deployment}/{workload}/{kind}/c{concurrency}"


class _LevelDecider:
    """Decides a level after each of its counted waves; ``decision`` is set once it stops."""

    def __init__(
        self,
        judge: Judge,
        key: str,
        search: SearchPlan,
        step: int,
        level: int,
        dip_check: bool = False,
    ):
        self.judge, self.key, self.search = judge, key, search
        self.step, self.level, self.dip_check = step, level, dip_check
        self.counted: list[WaveRecord] = []
        self.decision: SearchDecision | None = None
        self.passes = False

    async def __call__(self, wave: WaveRecord) -> None:
        self.counted.append(wave)
        trial, search = len(self.counted), self.search
        j = await self.judge(self.key, self.counted, search.confidence)
        decided = j.verdict in ("pass", "fail")
        if not decided and trial < search.trials_max:
            return
        passes = j.verdict == "pass" or (j.verdict == "straddles" and j.passes_median)
        if j.why:
            why = j.why
        elif decided:
            why = f"interval cleared the threshold at {search.confidence:.0%}"
        elif j.n_valid_trials == 0:
            why = f"no valid trial in {trial}"
        elif j.too_few_stream_rates:
            why = f"trials-max ({search.trials_max}) reached; too few stream rates for an interval"
        else:
            why = f"trials-max ({search.trials_max}) reached; the interval straddles"
        self.decision = wave.search_decision = SearchDecision(
            kind="level",
            search_step=self.step,
            concurrency=self.level,
            n_trials=trial,
            n_valid_trials=j.n_valid_trials,
            confidence=search.confidence,
            trials_max=search.trials_max,
            median_tok_s=j.median_tok_s,
            ci_low_tok_s=j.ci_low_tok_s,
            ci_high_tok_s=j.ci_high_tok_s,
            verdict=j.verdict,
            stop_reason=why,
            next_action=(
                ("holds below the answer" if passes else "dips: the curve is not monotone")
                if self.dip_check
                else ("go up" if passes else "go down")
            ),
        )
        self.passes = passes


class _SustainDecider:
    """Judges one sustain wave: it holds when its median still passes the threshold."""

    def __init__(
        self, judge: Judge, key: str, search: SearchPlan, step: int, level: int, last: bool
    ):
        self.judge, self.key, self.search = judge, key, search
        self.step, self.level, self.last = step, level, last
        self.held = False

    async def __call__(self, wave: WaveRecord) -> None:
        search = self.search
        j = await self.judge(self.key, [wave], search.confidence)
        self.held = j.n_valid_trials > 0 and j.passes_median
        wave.search_decision = SearchDecision(
            kind="sustain",
            search_step=self.step,
            concurrency=self.level,
            n_trials=1,
            n_valid_trials=j.n_valid_trials,
            confidence=search.confidence,
            trials_max=1,
            median_tok_s=j.median_tok_s,
            ci_low_tok_s=j.ci_low_tok_s,
            ci_high_tok_s=j.ci_high_tok_s,
            verdict="pass" if self.held else "fail",
            stop_reason=(
                f"held {search.sustain_factor:g}x the output length"
                if self.held
                else "the longer wave fell below the threshold or failed"
            ),
            next_action=(
                "done"
                if self.held
                else ("give up: not confirmed" if self.last else "move down one")
            ),
        )


def dip_check_levels(
    capacity: int,
    tested: set[int],
    buckets: Sequence[int] | None,
    n_sample: int,
) -> list[int]:
    """The skipped levels below ``capacity`` where a dip can hide, in the order to test them.

    With the engine's batch buckets declared, the first padded level after each bucket (the
    most padding, hence the deepest dip, of its range); else ``n_sample`` levels, each the
    middle of the widest gap between tested levels below the answer (widest first, lowest
    first on a tie). Levels already tested are never repeated; an empty list: nothing to check.
    """
    if capacity < 2 or (n_sample <= 0 and not buckets):
        return []
    if buckets:
        return sorted({b + 1 for b in buckets if b + 1 < capacity and b + 1 not in tested})
    known = sorted({0, capacity} | {t for t in tested if t < capacity})
    chosen: list[int] = []
    for _ in range(n_sample):
        gaps = [(b - a, a, b) for a, b in itertools.pairwise(known) if b - a > 1]
        if not gaps:
            break
        _, a, b = max(gaps, key=lambda g: (g[0], -g[1]))
        mid = (a + b) // 2
        chosen.append(mid)
        known = sorted([*known, mid])
    return sorted(chosen)


async def run_search(runner: WaveRunner, search: SearchPlan, judge: Judge) -> int:
    """Search, check below the answer for dips, then sustain; returns the live capacity (the
    marts hold the one of record)."""

    def key(level: int, kind: str) -> str:
        return level_key(runner.run_id, runner.deployment.name, runner.workload, level, kind)

    step = 0

    async def measure_level(level: int, dip_check: bool = False) -> bool:
        """A level's warm-up and counted trials until it is decided; True: it passes."""
        nonlocal step
        step += 1
        if runner.plan.warmup:
            await runner.measure(
                WavePlanItem(
                    level, 0, max_tokens=search.warmup_tokens, method="search", search_step=step
                )
            )
        decider = _LevelDecider(judge, key(level, "level"), search, step, level, dip_check)
        for trial in range(1, search.trials_max + 1):
            item = WavePlanItem(
                level,
                trial,
                max_tokens=search.trial_tokens,
                length_factor=1.0 if search.trial_tokens else search.trial_share,
                min_tokens=2 if search.trial_tokens else search.min_trial_tokens,
                method="search",
                search_step=step,
            )
            await runner.measure(item, decider)
            if decider.decision is not None:
                break
        assert decider.decision is not None  # the last trial always decides
        return decider.passes

    bisect = Bisection(search.max_level)
    outcome: dict[int, bool] = {}
    while (level := bisect.next_level()) is not None:
        outcome[level] = await measure_level(level)
        bisect.record(level, outcome[level])
    # bisection trusts a monotone curve: test the skipped levels below its answer where a
    # padded batch can dip; the answer becomes the largest level every tested level up to
    # which passes (dbt's capacity rule, which flags the curve non-monotone)
    for level in dip_check_levels(
        bisect.capacity, set(outcome), runner.deployment.batch_buckets, search.dip_check_levels
    ):
        outcome[level] = await measure_level(level, dip_check=True)
    capacity = 0
    for level in sorted(outcome):
        if not outcome[level]:
            break
        capacity = level
    if search.sustain_factor <= 0:
        return capacity
    # one longer wave at the found capacity; a fall moves the answer down one level and
    # sustains again (``sustain_retries`` times), and says so
    level = capacity
    for attempt in range(search.sustain_retries + 1):
        if level < 1:
            break
        step += 1
        last = attempt == search.sustain_retries or level == 1
        sustain = _SustainDecider(judge, key(level, "sustain"), search, step, level, last)
        item = WavePlanItem(
            level,
            1,
            length_factor=search.sustain_factor,
            probe="sustain",
            method="search",
            search_step=step,
        )
        await runner.measure(item, sustain)
        if sustain.held:
            return level
        level -= 1
    return level
