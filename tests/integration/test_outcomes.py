"""Every outcome, produced by a real HTTP server on loopback (the simulator's fault switches)."""

from __future__ import annotations

import time

import pytest

from sparkcap.config.deployment import Timeouts
from sparkcap.loadgen.records import CountSource, RequestRecord, Status
from sparkcap.night.progress import live_decode_tok_s
from sparkcap.servers.sim.server import SimServer
from tests.support.sims import fast_profile, faulty, sweep

pytestmark = [pytest.mark.integration, pytest.mark.reliability]


@pytest.fixture(scope="module")
def sim() -> SimServer:
    profiles = [
        fast_profile("m"),
        fast_profile("k3", fixed_chunk_tokens=3),
        faulty("short", short_output_tokens=5),
        faulty("cut", cut_after_tokens=6),
        faulty("nodone", end_without_done_after_tokens=6),
        faulty("err", error_after_tokens=4),
        faulty("r429", reject_status=429, retry_after_s=7),
        faulty("r503", reject_status=503, retry_after_s=3),
        faulty("nousage", omit_usage=True),
        faulty("stall", stall_after_tokens=3),
        faulty("trickle", trickle_interval_s=0.3),
        faulty("half", every=2, cut_after_tokens=4),
    ]
    with SimServer(profiles) as s:
        yield s


def test_clean_wave(sim: SimServer) -> None:
    (w,) = sweep(sim.endpoint, "m", levels=(3,), extra_body={"ignore_eos": True})
    assert len(w.requests) == 3
    for r in w.requests:
        assert r.status is Status.OK
        assert r.completion_tokens == 20 and r.count_source is CountSource.USAGE
        assert r.finish_reason == "length" and r.saw_done
        assert r.sent_ns is not None and r.first_token_ns is not None
        assert 0 <= r.sent_ns < r.first_token_ns <= r.last_token_ns < r.end_ns
        assert r.n_chunks < 20  # multi-token chunks: chunks are not tokens
        assert r.prompt_tokens and r.prompt_tokens > 10
        rate = live_decode_tok_s(r)
        assert rate is not None and rate > 0
    assert w.start_skew_ms is not None and w.start_skew_ms < 100
    assert w.loop_lag_p99_ms is not None and w.client_cpu_pct is not None
    assert w.timing_error_bound is not None and w.loop_lag_max_ms is not None
    assert w.attempt == 1 and w.superseded_reason is None


def test_continuous_usage_counts_every_chunk(sim: SimServer) -> None:
    (w,) = sweep(sim.endpoint, "k3", levels=(2,), max_tokens=21, continuous_usage=True)
    for r in w.requests:
        assert r.count_source is CountSource.CONTINUOUS_USAGE
        assert list(r.chunks.n_tokens) == [1] + [3] * 6 + [2]
        assert sum(r.chunks.n_tokens) == r.completion_tokens == 21


def test_short(sim: SimServer) -> None:
    (w,) = sweep(sim.endpoint, "short", extra_body={"ignore_eos": True})
    for r in w.requests:
        assert r.status is Status.SHORT
        assert (r.requested_tokens, r.completion_tokens, r.finish_reason) == (20, 5, "stop")
        assert "5 of 20" in (r.error or "")


def test_cut_stream_is_truncated_with_partial_chunks(sim: SimServer) -> None:
    (w,) = sweep(sim.endpoint, "cut")
    for r in w.requests:
        assert r.status is Status.TRUNCATED
        assert r.n_chunks >= 2 and r.first_token_ns is not None
        assert r.completion_tokens is None


def test_clean_end_without_done_is_truncated(sim: SimServer) -> None:
    (w,) = sweep(sim.endpoint, "nodone")
    assert {r.status for r in w.requests} == {Status.TRUNCATED}
    assert all(r.n_chunks >= 2 for r in w.requests)


def test_in_band_error(sim: SimServer) -> None:
    (w,) = sweep(sim.endpoint, "err")
    for r in w.requests:
        assert r.status is Status.SERVER_ERROR and r.http_status == 200
        assert "simulated engine failure" in (r.error or "")
        assert live_decode_tok_s(r) is None


@pytest.mark.parametrize(("model", "status", "retry"), [("r429", 429, "7"), ("r503", 503, "3")])
def test_rejected_with_retry_after_and_no_retry(
    sim: SimServer, model: str, status: int, retry: str
) -> None:
    engine = sim.app.state.engines[model]
    before = engine.rejected_total
    (w,) = sweep(sim.endpoint, model, levels=(3,))
    for r in w.requests:
        assert r.status is Status.REJECTED
        assert r.http_status == status and r.retry_after == retry
    assert engine.rejected_total - before == 3  # exactly one attempt per stream


def test_missing_usage_is_null_not_guessed(sim: SimServer) -> None:
    (w,) = sweep(sim.endpoint, "nousage")
    for r in w.requests:
        assert r.status is Status.OK
        assert r.completion_tokens is None and r.count_source is CountSource.NONE
        assert live_decode_tok_s(r) is None


# The two deadline tests hold the client's own wall time to its deadline plus a second, so
# they run with the timing tests (client_timing): beside two processes at niceness -15 taking
# the cores 4 s at a time (make test's timing phase is as bursty), the idle one can take 6.2 s
# against its 6 s bound.
def _timed_out(
    sim: SimServer, model: str, timeouts: Timeouts, deadline_s: float, min_chunks: int
) -> list[RequestRecord]:
    """One wave of ``model`` under ``timeouts``: the sweep ends within ``deadline_s`` + 5 s
    (set-up included: it never hangs) and every stream timed out after ``min_chunks`` chunks
    or more; its streams."""
    t0 = time.monotonic()
    (w,) = sweep(sim.endpoint, model, timeouts=timeouts)
    assert time.monotonic() - t0 < deadline_s + 5
    for r in w.requests:
        assert r.status is Status.TIMEOUT and r.n_chunks >= min_chunks
    return w.requests


@pytest.mark.client_timing
def test_idle_stream_times_out_within_bound(sim: SimServer) -> None:
    for r in _timed_out(sim, "stall", Timeouts(read_idle_s=1.0, total_s=30), 1.0, min_chunks=1):
        # each stream failed within T + 1 s of its last byte, on the monotonic clock
        assert (r.end_ns - r.last_token_ns) / 1e9 < 1.0 + 1.0


@pytest.mark.client_timing
def test_trickle_hits_total_deadline(sim: SimServer) -> None:
    for r in _timed_out(sim, "trickle", Timeouts(read_idle_s=5, total_s=1.5), 1.5, min_chunks=2):
        assert (r.end_ns - r.sent_ns) / 1e9 < 1.5 + 1.0  # the deadline D held within D + 1 s


def test_failures_in_a_wave_do_not_touch_the_other_streams(sim: SimServer) -> None:
    (w,) = sweep(sim.endpoint, "half", levels=(4,))
    statuses = sorted(r.status.value for r in w.requests)
    assert statuses == ["ok", "ok", "truncated", "truncated"]
    for r in w.requests:
        if r.status is Status.OK:
            assert r.completion_tokens == 20
