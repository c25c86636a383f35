"""Padded batches: a decode step of n streams costs a step of the smallest captured size >= n,
and more when padded (vLLM's CUDA-graph capture sizes; 17-25 % dips reported on DGX Spark at
exactly those levels). This is what makes a rate curve that bisection cannot trust: 5 streams
slower than 8."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sparkcap.servers.sim.engine import Engine, SimRequest
from sparkcap.servers.sim.profile import SimProfile
from tests.support.sims import clockwork_profile

STEP_S = 0.01
SLOWDOWN = 0.2
BUCKETS = [1, 2, 4, 8, 16, 32]
PAD = 0.2


def _profile(**kw: object) -> SimProfile:
    """Steps slowed by the batch only, run at the next bucket up, a padded step costing more."""
    fields: dict[str, object] = dict(
        batch_slowdown=SLOWDOWN, batch_buckets=BUCKETS, bucket_pad_slowdown=PAD
    )
    return clockwork_profile(STEP_S, **{**fields, **kw})


def _study_rates(profile: SimProfile, streams: int, tokens: int = 40) -> list[float]:
    """Each stream's (n - 1) / (t_last - t_first) from the chunks the engine sends."""
    reqs = [SimRequest(f"r{i}", f"write code {i}", tokens, 0.0, 0, True, i) for i in range(streams)]
    sent = Engine(profile).schedule(reqs)
    rates = []
    for req in reqs:
        times = [s.t_s for s in sent if s.request_id == req.request_id and s.emit.kind == "tokens"]
        rates.append((tokens - 1) / (times[-1] - times[0]))
    return rates


def _step_s(n_streams: int, profile: SimProfile) -> float:
    engine = Engine(profile)
    engine.running = [SimRequest(f"r{i}", "x", 10, 0.0, 0, True, i) for i in range(n_streams)]
    return engine._decode_step_s()


def test_a_padded_step_costs_its_bucket_and_the_pad_slowdown() -> None:
    p = _profile()
    bucket_step = STEP_S * (1 + SLOWDOWN * 7)  # a step of 8
    assert _step_s(8, p) == pytest.approx(bucket_step)
    for n in (5, 6, 7):
        assert _step_s(n, p) == pytest.approx(bucket_step * (1 + PAD))
    assert _step_s(4, p) == pytest.approx(STEP_S * (1 + SLOWDOWN * 3))
    # past the largest bucket a step runs at n, unpadded
    assert _step_s(40, p) == pytest.approx(STEP_S * (1 + SLOWDOWN * 39))


def test_five_streams_decode_slower_than_eight() -> None:
    p = _profile()
    at_5, at_8 = _study_rates(p, 5), _study_rates(p, 8)
    assert max(at_5) == pytest.approx(1 / (STEP_S * 2.4 * 1.2))
    assert min(at_8) == pytest.approx(1 / (STEP_S * 2.4))
    assert max(at_5) < min(at_8)  # the dip: more streams, each faster
    # without buckets the same engine is monotone
    smooth = _profile(batch_buckets=None)
    assert min(_study_rates(smooth, 5)) > max(_study_rates(smooth, 8))


def test_buckets_must_be_ascending_positive() -> None:
    for bad in ([], [0, 4], [4, 2], [2, 2, 4]):
        with pytest.raises(ValidationError):
            _profile(batch_buckets=bad)
    with pytest.raises(ValidationError):
        _profile(bucket_pad_slowdown=-0.1)
