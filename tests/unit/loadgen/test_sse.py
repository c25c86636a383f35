from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkcap.loadgen.sse import SSEParser, SSEProtocolError


def parse_all(parts: list[bytes], **kw: int) -> list[tuple[str, str]]:
    p = SSEParser(**kw)
    events = []
    for part in parts:
        events += p.feed(part)
    events += p.close()
    return [(e.event, e.data) for e in events]


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    parts, prev = [], 0
    for c in points:
        parts.append(data[prev:c])
        prev = c
    parts.append(data[prev:])
    return parts


STREAM = (
    b": keep-alive comment\r\n"
    b'data: {"a": 1}\r\n\r\n'
    b"event: error\n"
    b"data: line one\n"
    b"data: line two\n\n"
    b"data:no-space\r\r"
    b'id: 7\nretry: 100\ndata: {"u": "\xc3\xa9"}\n\n'
    b"data: [DONE]\n\n"
)
EXPECTED = [
    ("message", '{"a": 1}'),
    ("error", "line one\nline two"),
    ("message", "no-space"),
    ("message", '{"u": "é"}'),
    ("message", "[DONE]"),
]


def test_whole_stream() -> None:
    assert parse_all([STREAM]) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=10_000), max_size=40))
@settings(max_examples=300, deadline=None)
def test_any_rechunking_gives_identical_events(cuts: list[int]) -> None:
    assert parse_all(split_at(STREAM, cuts)) == EXPECTED


def test_one_byte_at_a_time() -> None:
    assert parse_all([bytes([b]) for b in STREAM]) == EXPECTED


@given(
    st.lists(
        st.text(
            alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"),
            max_size=30,
        ),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from([b"\n", b"\r\n", b"\r"]),
    st.lists(st.integers(min_value=0, max_value=4000), max_size=20),
)
@settings(max_examples=200, deadline=None)
def test_random_payloads_any_line_ending(payloads: list[str], eol: bytes, cuts: list[int]) -> None:
    data = b"".join(b"data: " + p.encode() + eol + eol for p in payloads)
    got = parse_all(split_at(data, cuts))
    assert got == [("message", p) for p in payloads]


def test_crlf_split_between_reads_does_not_make_blank_line() -> None:
    # "\r" ends one read, "\n" starts the next: one line end, not two
    assert parse_all([b"data: x\r", b"\ndata: y\r", b"\n\r\n"]) == [("message", "x\ny")]


def test_oversize_line_is_rejected() -> None:
    p = SSEParser(max_line_bytes=1000)
    with pytest.raises(SSEProtocolError):
        p.feed(b"data: " + b"x" * 2000)


def test_oversize_event_is_rejected() -> None:
    p = SSEParser(max_line_bytes=1000, max_event_bytes=1500)
    with pytest.raises(SSEProtocolError):
        p.feed(b"data: " + b"x" * 900 + b"\n" + b"data: " + b"y" * 900 + b"\n")


def test_invalid_utf8_is_rejected() -> None:
    with pytest.raises(SSEProtocolError):
        SSEParser().feed(b"data: \xff\xfe\n\n")


def test_unterminated_last_line_is_dropped_but_complete_event_without_blank_kept() -> None:
    assert parse_all([b"data: [DONE]\n"]) == [("message", "[DONE]")]
    assert parse_all([b"data: [DO"]) == []
