from __future__ import annotations

import pytest

from sparkcap.loadgen.records import RequestRecord, Status, decode_rate
from sparkcap.loadgen.wave import effective_concurrency, peak_concurrency


def test_decode_rate_is_tokens_minus_one_over_first_to_last() -> None:
    # 1000 tokens, first at 1 s, last at 51 s: 999 / 50 = 19.98
    assert decode_rate(1000, 1_000_000_000, 51_000_000_000) == pytest.approx(19.98)


@pytest.mark.parametrize(
    ("tokens", "first", "last", "status"),
    [
        (None, 0, 10, Status.OK),
        (1, 0, 10, Status.OK),
        (10, 5, 5, Status.OK),
        (10, None, 5, Status.OK),
        (10, 0, 10**9, Status.SHORT),
        (10, 0, 10**9, Status.TRUNCATED),
    ],
)
def test_no_rate_without_a_measurable_ok_stream(
    tokens: int | None, first: int | None, last: int, status: Status
) -> None:
    assert decode_rate(tokens, first, last, status) is None


def _r(first: int, last: int) -> RequestRecord:
    r = RequestRecord("x", 0, "p", 10, 10, 0.0)
    r.first_token_ns, r.last_token_ns = first, last
    return r


def test_effective_concurrency_full_overlap() -> None:
    assert effective_concurrency([_r(0, 100), _r(0, 100), _r(0, 100)]) == pytest.approx(3.0)


def test_effective_concurrency_serialized_by_slots() -> None:
    # 4 streams, 2 slots: two run, then two more -> about 2 at a time
    rs = [_r(0, 100), _r(0, 100), _r(100, 200), _r(100, 200)]
    assert effective_concurrency(rs) == pytest.approx(2.0)


def test_peak_concurrency_detects_queueing() -> None:
    assert peak_concurrency([_r(0, 100), _r(10, 100), _r(50, 150)]) == 3
    # slot freed at 100, next stream starts at 100: never overlapped
    assert peak_concurrency([_r(0, 100), _r(0, 100), _r(100, 200), _r(100, 200)]) == 2
    assert peak_concurrency([]) == 0


def test_effective_concurrency_empty() -> None:
    assert effective_concurrency([]) is None
