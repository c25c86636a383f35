"""The plan's rows as each deployment's replay offer (sparkcap.night.replay.replay_options)."""

from __future__ import annotations

import pytest

from sparkcap.errors import ReplayError
from sparkcap.night.replay import replay_options
from sparkcap.publish.marts import ReplayPlanRow


def _row(
    dep: str, workload: str, rate: float, tokens: int | None, rate_plan: float = 0.4
) -> ReplayPlanRow:
    """The burst plan's ``rate`` (Little's) for 2 planned streams, and the rate plan's
    ``rate_plan`` requests a second, which the open-loop model keeps 1.2 streams in flight."""
    return ReplayPlanRow(
        dep, workload, 2.0, 3.0, tokens, rate, 1.0, 32_000, 0.05, None, rate_plan, 1.2
    )


def test_each_stream_asks_for_the_length_its_rate_was_measured_on() -> None:
    """Little's W came from 64-token code and 96-token prose streams: the replay asks for
    those, whatever the fleet file's workloads say; a length no request can ask for is left
    to the workload's default rather than sent."""
    rows = [_row("a", "code", 0.5, 64), _row("a", "prose", 0.25, 96), _row("b", "code", 0.5, 1)]
    offers = replay_options(rows, plan_kind="burst", duration_s=10.0, rate_factor=1.3, seed=2)
    assert (offers["a"].code_tokens, offers["a"].prose_tokens) == (64, 96)
    assert (offers["b"].code_tokens, offers["b"].prose_tokens) == (None, None)
    assert offers["a"].rate_factor == 1.3 and offers["a"].code_per_s == 0.5  # the plan's own


def test_one_replay_across_the_fleet_carries_one_id_and_the_next_another() -> None:
    rows = [_row("a", "code", 0.5, 64), _row("b", "code", 0.5, 64)]
    first = replay_options(rows, duration_s=10.0, rate_factor=1.0, seed=1)
    second = replay_options(rows, duration_s=10.0, rate_factor=1.0, seed=1)
    assert first["a"].replay_id == first["b"].replay_id is not None
    assert second["a"].replay_id != first["a"].replay_id  # same factor and seed, two verdicts


def test_the_rate_plan_is_the_default_and_the_burst_plan_is_asked_for_by_name() -> None:
    """By default a replay offers the rate plan's requests a second (open-loop capacity) and
    the streams the model predicts for them; ``burst`` offers Little's rate for the burst
    plan's streams; each offer says which, and a plan that is neither is refused."""
    rows = [_row("a", "code", 0.5, 64, rate_plan=0.4), _row("a", "prose", 0.25, 96, 0.0)]
    rate = replay_options(rows, duration_s=10.0, rate_factor=1.0, seed=1)["a"]
    assert (rate.plan_kind, rate.code_per_s, rate.prose_per_s) == ("rate", 0.4, 0.0)
    assert rate.planned_streams == 2.4  # 1.2 predicted in flight for each workload's row
    burst = replay_options(rows, plan_kind="burst", duration_s=10.0, rate_factor=1.0, seed=1)
    assert (burst["a"].plan_kind, burst["a"].code_per_s, burst["a"].prose_per_s) == (
        "burst",
        0.5,
        0.25,
    )
    assert burst["a"].planned_streams == 4.0
    with pytest.raises(ReplayError, match="choose rate or burst"):
        replay_options(rows, plan_kind="steady", duration_s=10.0, rate_factor=1.0, seed=1)


def test_a_search_widens_until_it_brackets_lambda_star_then_halves_the_bracket() -> None:
    """From the plan (1.0x): a hold widens by 1.25, the first failure closes the bracket and
    each step tries its midpoint; a step that decides nothing stops the search there."""
    from sparkcap.night.replay import Bracket

    b = Bracket()
    b.record("holds")
    assert (b.holds, b.fails, b.factor) == (1.0, None, 1.25)
    b.record("fails")
    assert (b.holds, b.fails, b.factor) == (1.0, 1.25, 1.125)
    b.record("holds")
    assert (b.holds, b.fails, b.factor) == (1.125, 1.25, 1.1875)
    down = Bracket()
    down.record("fails")
    assert (down.fails, down.factor) == (1.0, 0.8)
    down.record("too short")
    assert down.stopped == "too short at 0.8x" and down.factor == 0.8


def test_a_replay_larger_than_one_client_holds_is_refused_before_its_schedule_is_built() -> None:
    """--duration 86400 --rate-factor 100 once built a schedule of gigabytes before sending
    anything: the expected count is checked against MAX_REPLAY_REQUESTS first, in one line."""
    rows = [_row("a", "code", 0.5, 64, rate_plan=0.4)]
    with pytest.raises(ReplayError, match="more than the 200,000 one replay holds") as caught:
        replay_options(rows, duration_s=86_400.0, rate_factor=100.0, seed=1)
    assert "shorten --duration or lower --rate-factor" in str(caught.value)
    assert replay_options(rows, duration_s=3_600.0, rate_factor=1.0, seed=1)  # 1,440: fine


def test_a_replays_request_is_bounded_by_its_schedule_plus_a_margin() -> None:
    from sparkcap.config.deployment import Deployment
    from sparkcap.config.probes import ReplayOptions
    from sparkcap.loadgen.replay import request_limit_s

    dep = Deployment(name="a", endpoint="http://127.0.0.1:9/v1", model="m")  # type: ignore[arg-type]
    short = ReplayOptions(duration_s=3.0, planned_streams=1.0)
    long = ReplayOptions(duration_s=600.0, planned_streams=1.0)
    assert dep.timeouts.total_s > 63.0
    assert request_limit_s(dep, short) == 63.0  # 3 s + the 60 s margin, not 1,800 s
    assert request_limit_s(dep, long) == min(dep.timeouts.total_s, 1_200.0)
