"""The live rate a progress line shows. The rate of record is dbt's (``int_stream_rates``,
unit-tested in ``dbt/models/intermediate/_intermediate.yml``); the live one must at least
agree with it on what has no rate."""

from __future__ import annotations

import pytest

from sparkcap.loadgen.records import RequestRecord, Status
from sparkcap.night.progress import live_decode_tok_s


def _r(tokens: int | None, first: int | None, last: int | None, status: Status) -> RequestRecord:
    r = RequestRecord("x", 0, "p", 10, 10, 0.0)
    r.completion_tokens, r.first_token_ns, r.last_token_ns, r.status = tokens, first, last, status
    return r


def test_live_rate_is_tokens_minus_one_over_first_to_last() -> None:
    # 1000 tokens, first at 1 s, last at 51 s: 999 / 50 = 19.98
    assert live_decode_tok_s(_r(1000, 10**9, 51 * 10**9, Status.OK)) == pytest.approx(19.98)


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
def test_no_live_rate_without_a_measurable_ok_stream(
    tokens: int | None, first: int | None, last: int | None, status: Status
) -> None:
    assert live_decode_tok_s(_r(tokens, first, last, status)) is None
