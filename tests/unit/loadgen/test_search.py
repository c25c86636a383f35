"""The search's choice of levels, trials and sustain waves, with a scripted judge."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from sparkcap.config.command_line import search_plan
from sparkcap.config.plan import SearchPlan, SweepPlan
from sparkcap.errors import OptionError
from sparkcap.loadgen.records import WaveRecord
from sparkcap.loadgen.search import Bisection, LevelJudgement, dip_check_levels, run_search
from tests.support.waves import wave_record


def _tested(capacity: int, max_level: int = 32) -> tuple[list[int], int]:
    b = Bisection(max_level)
    seen = []
    while (lv := b.next_level()) is not None:
        seen.append(lv)
        b.record(lv, lv <= capacity)
    return seen, b.capacity


@pytest.mark.parametrize("capacity", range(0, 40))
def test_bisection_finds_every_integer_capacity(capacity: int) -> None:
    seen, found = _tested(capacity)
    assert found == min(capacity, 32)
    assert len(seen) == len(set(seen))  # no level is measured twice
    # doubling to the first failure (or 32), then at most log2 of the gap
    assert len(seen) <= 6 + 4


def test_bisection_paths() -> None:
    assert _tested(11)[0] == [1, 2, 4, 8, 16, 12, 10, 11]
    assert _tested(0)[0] == [1]
    assert _tested(32)[0] == [1, 2, 4, 8, 16, 32]
    assert _tested(5, max_level=6)[0] == [1, 2, 4, 6, 5]


@dataclass
class FakeRunner:
    """Stands for sweep.WaveRunner: records what would be measured."""

    plan: SweepPlan
    run_id: str = "r"
    workload: str = "code"
    buckets: tuple[int, ...] | None = None
    deployment: Any = None
    items: list[Any] = field(default_factory=list)
    waves: list[WaveRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.deployment = type("D", (), {"name": "d", "batch_buckets": self.buckets})()

    async def measure(self, item: Any, decide: Any = None) -> WaveRecord:
        self.items.append(item)
        wave = wave_record(
            item.concurrency,
            item.trial,
            run_id=self.run_id,
            deployment="d",
            workload=self.workload,
            wave_id=f"w{len(self.items)}",
            endpoint="e",
            probe=item.probe,
            method=item.method,
            search_step=item.search_step,
        )
        if decide is not None:
            await decide(wave)
        self.waves.append(wave)
        return wave


def scripted_judge(verdicts: dict[tuple[str, int], list[str]], capacity: int) -> Any:
    """Level verdicts in trial order (default: clear pass/fail by ``capacity``)."""

    async def judge(key: str, waves: Sequence[WaveRecord], confidence: float) -> LevelJudgement:
        level = waves[-1].concurrency
        kind = "sustain" if "/sustain/" in key else "level"
        script = verdicts.get((kind, level))
        passes = level <= capacity
        default = "pass" if passes else "fail"
        v = script[min(len(waves), len(script)) - 1] if script else default
        median_passes = v == "pass" or (v == "straddles" and passes)
        return LevelJudgement(1, 20.0, 19.0, 21.0, v, passes_median=median_passes)

    return judge


def test_a_level_takes_trials_until_its_interval_clears() -> None:
    runner = FakeRunner(SweepPlan(warmup=True))
    search = SearchPlan(max_level=16, trials_max=3, sustain_factor=0)
    # level 8 straddles once, then clears; level 16 straddles to the end (median fails)
    judge = scripted_judge(
        {("level", 8): ["straddles", "pass"], ("level", 16): ["straddles"] * 3}, capacity=8
    )
    found = asyncio.run(run_search(runner, search, judge))  # type: ignore[arg-type]
    assert found == 8
    counted = [(i.concurrency, i.trial) for i in runner.items if i.trial > 0]
    assert counted.count((8, 2)) == 1 and (8, 3) not in counted
    assert [t for c, t in counted if c == 16] == [1, 2, 3]
    warmups = [i for i in runner.items if i.trial == 0]
    assert all(i.max_tokens == search.warmup_tokens for i in warmups)
    # trials ask a quarter of each stream's length (at least 32 tokens)
    trials = [i for i in runner.items if i.trial > 0]
    assert {(i.max_tokens, i.length_factor, i.min_tokens) for i in trials} == {(None, 0.25, 32)}
    decisions = {w.concurrency: w.search_decision for w in runner.waves if w.search_decision}
    d16 = decisions[16]
    assert d16 is not None and d16.verdict == "straddles" and d16.n_trials == 3
    assert "trials-max" in d16.stop_reason and d16.next_action == "go down"


def test_a_level_with_too_few_stream_rates_is_not_said_to_straddle_an_interval() -> None:
    """One stream in one trial is no interval (dbt's ``search_level_interval`` says so): the
    level's record says that, not that an interval straddles the threshold."""
    runner = FakeRunner(SweepPlan(warmup=False))

    async def judge(key: str, waves: Sequence[WaveRecord], confidence: float) -> LevelJudgement:
        few = waves[-1].concurrency < 3  # 1 and 2 streams: fewer rates than an interval needs
        return LevelJudgement(
            1, 90.0, 90.0, 90.0, "straddles" if few else "pass", True, too_few_stream_rates=few
        )

    search = SearchPlan(max_level=4, trials_max=1, sustain_factor=0)
    assert asyncio.run(run_search(runner, search, judge)) == 4  # type: ignore[arg-type]
    said = {w.concurrency: w.search_decision for w in runner.waves if w.search_decision}
    for level in (1, 2):
        d = said[level]
        assert d is not None and d.verdict == "straddles"
        assert d.stop_reason == "trials-max (1) reached; too few stream rates for an interval"
    d4 = said[4]
    assert d4 is not None and "interval cleared" in d4.stop_reason


def test_a_fallen_sustain_wave_moves_the_answer_down() -> None:
    runner = FakeRunner(SweepPlan(warmup=False))
    search = SearchPlan(max_level=16, sustain_factor=3, sustain_retries=2)
    judge = scripted_judge({("sustain", 11): ["fail"]}, capacity=11)
    found = asyncio.run(run_search(runner, search, judge))  # type: ignore[arg-type]
    assert found == 10
    sustain = [i for i in runner.items if i.probe == "sustain"]
    assert [(i.concurrency, i.length_factor) for i in sustain] == [(11, 3.0), (10, 3.0)]
    said = [w.search_decision for w in runner.waves if w.probe == "sustain"]
    assert [(d.verdict, d.next_action) for d in said if d] == [
        ("fail", "move down one"),
        ("pass", "done"),
    ]


def test_no_level_passes() -> None:
    runner = FakeRunner(SweepPlan(warmup=False))
    found = asyncio.run(
        run_search(runner, SearchPlan(), scripted_judge({}, capacity=0))  # type: ignore[arg-type]
    )
    assert found == 0
    assert [i.concurrency for i in runner.items] == [1]  # no sustain wave at 0 streams


def test_search_options_need_search() -> None:
    assert search_plan(False) is None
    assert search_plan(True, max_level=8) == SearchPlan(max_level=8)
    with pytest.raises(OptionError, match="--max-level, --confidence apply only with --search"):
        search_plan(False, max_level=8, confidence=0.8)


def test_a_fleet_file_can_search_a_workload(tmp_path: Any) -> None:
    from sparkcap.config.fleet import load_fleet
    from sparkcap.errors import FleetError

    path = tmp_path / "f.yaml"
    path.write_text(
        "name: f\nworkloads:\n"
        "  code: {levels: [1, 2], search: {max_level: 8, confidence: 0.95}}\n"
        "  prose: {levels: [1, 2]}\n"
        "deployments:\n  - {name: d, model: m, endpoint: 'http://127.0.0.1:1/v1'}\n"
    )
    plans = {r.workload: r.plan for r in load_fleet(path).sweep_requests()}
    assert plans["code"].search == SearchPlan(max_level=8, confidence=0.95)
    assert plans["prose"].search is None
    path.write_text(path.read_text().replace("confidence: 0.95", "confidence: 1.5"))
    with pytest.raises(FleetError, match="confidence"):
        load_fleet(path)


def test_dip_check_levels_are_the_first_padded_level_after_each_bucket_or_gap_middles() -> None:
    searched = {1, 2, 4, 8, 16, 32, 24, 28, 26, 25}
    # declared capture sizes: the first padded level of each range below the answer
    assert dip_check_levels(25, searched, (1, 2, 4, 8, 16, 24, 32), 2) == [3, 5, 9, 17]
    # none declared: the middle of the widest untested gap, twice (lowest first on a tie)
    assert dip_check_levels(11, {1, 2, 4, 8, 16, 12, 10, 11}, None, 2) == [3, 6]
    assert dip_check_levels(11, {1, 2, 4, 8, 16, 12, 10, 11}, None, 0) == []
    assert dip_check_levels(2, {1, 2, 4, 3}, None, 2) == []  # nothing skipped below 2
    assert dip_check_levels(1, {1, 2}, (1, 2, 4), 2) == []


def test_a_dip_below_the_bisected_answer_is_caught_and_the_answer_is_the_monotone_one() -> None:
    """Every level to 14 passes but 5 (a padded batch, buckets 1, 2, 4, 8, 16): bisection
    alone answers 14; the check below it finds 5 failing, so the search answers 4 (every
    tested level up to 4 passes), sustains there and says the curve is not monotone."""
    runner = FakeRunner(SweepPlan(warmup=False), buckets=(1, 2, 4, 8, 16))
    search = SearchPlan(max_level=32, sustain_factor=1)
    judge = scripted_judge({("level", 5): ["fail"]}, capacity=14)
    found = asyncio.run(run_search(runner, search, judge))  # type: ignore[arg-type]
    assert found == 4
    levels = [i.concurrency for i in runner.items if i.probe is None and i.trial == 1]
    assert levels == [1, 2, 4, 8, 16, 12, 14, 15, 3, 5, 9]
    said = {w.concurrency: w.search_decision for w in runner.waves if w.search_decision}
    assert said[5] is not None and said[5].next_action == "dips: the curve is not monotone"
    assert said[9] is not None and said[9].next_action == "holds below the answer"
    assert [i.concurrency for i in runner.items if i.probe == "sustain"] == [4]
