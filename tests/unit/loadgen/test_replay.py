"""The replay's schedule: seeded, the plan's load exactly, each role on its own."""

from __future__ import annotations

import itertools

from sparkcap.loadgen.replay import poisson_arrivals


def test_the_schedule_offers_the_plans_count_in_time_order_and_repeats_with_its_seed() -> None:
    rates = {"code": 4.5, "prose": 1.5, "long": 2 / 60}
    a = poisson_arrivals(rates, 20.0, 7)
    assert [x.at_s for x in a] == sorted(x.at_s for x in a)
    counts = {r: sum(x.role == r for x in a) for r in rates}
    assert counts == {"code": 90, "prose": 30, "long": 1}  # round(rate x duration), no luck
    assert all(0 <= x.at_s < 20.0 for x in a)
    assert a == poisson_arrivals(rates, 20.0, 7)
    assert a != poisson_arrivals(rates, 20.0, 8)


def test_one_roles_rate_leaves_the_others_instants_alone() -> None:
    base = poisson_arrivals({"code": 3.0, "prose": 1.0}, 10.0, 1)
    more = poisson_arrivals({"code": 3.9, "prose": 1.0}, 10.0, 1)
    assert [x for x in base if x.role == "prose"] == [x for x in more if x.role == "prose"]
    assert sum(x.role == "code" for x in more) == 39
    assert poisson_arrivals({"code": 0.0}, 10.0, 1) == []


def test_the_gaps_are_poisson_not_a_metronome() -> None:
    """Conditioned on its count, a Poisson process's gaps are still exponential-like: their
    coefficient of variation is near 1 (a fixed interval would be 0)."""
    a = poisson_arrivals({"code": 50.0}, 100.0, 3)
    gaps = [b.at_s - x.at_s for x, b in itertools.pairwise(a)]
    mean = sum(gaps) / len(gaps)
    sd = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5
    assert 0.9 < sd / mean < 1.1
