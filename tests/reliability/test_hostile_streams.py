"""Hostile and oddly delivered streams fail only their own request, with bounded memory."""

from __future__ import annotations

import random
import tracemalloc

import pytest

from tests.integration.helpers import sweep
from tests.reliability.rawserver import RawServer, vllm_stream

pytestmark = pytest.mark.reliability

TOKENS = [f"tok{i} " for i in range(12)]


def rows(waves):  # type: ignore[no-untyped-def]
    return [
        (
            r.status.value,
            r.completion_tokens,
            r.n_chunks,
            r.finish_reason,
            r.count_source.value,
            list(r.chunks.n_chars),
        )
        for w in waves
        for r in sorted(w.requests, key=lambda r: r.stream_index)
    ]


def split_script(body: bytes, seed: int, crlf: bool = True):  # type: ignore[no-untyped-def]
    def script(ordinal: int):  # type: ignore[no-untyped-def]
        rng = random.Random(seed * 1000 + ordinal)
        data = body if crlf else body.replace(b"\r\n", b"\n")
        i = 0
        while i < len(data):
            n = rng.choice([1, 1, 2, 3, 7, 50, 400])
            yield data[i : i + n]
            yield 0.0005
            i += n

    return script


def test_rechunked_streams_give_identical_rows() -> None:
    body = vllm_stream(TOKENS)
    with RawServer(lambda o: [body]) as srv:
        reference = rows(sweep(srv.endpoint, "m", levels=(3,), max_tokens=24))
    assert reference[0][:2] == ("ok", 24) and reference[0][2] == 12
    for seed, crlf in ((1, True), (2, False), (3, True)):
        with RawServer(split_script(body, seed, crlf)) as srv:
            assert rows(sweep(srv.endpoint, "m", levels=(3,), max_tokens=24)) == reference


def test_non_json_data_line_is_a_protocol_error_not_a_skip() -> None:
    good = vllm_stream(TOKENS)
    bad = good.replace(
        b'data: {"choices": [{"index": 0, "delta": {"content": "tok3 "}}]}',
        b"data: tok3 is not json",
    )
    with RawServer(lambda o: [bad if o == 1 else good]) as srv:
        (w,) = sweep(srv.endpoint, "m", levels=(3,), max_tokens=24)
    statuses = sorted(r.status.value for r in w.requests)
    assert statuses == ["ok", "ok", "protocol_error"]
    bad_req = next(r for r in w.requests if r.status.value == "protocol_error")
    assert "not JSON" in (bad_req.error or "") and bad_req.n_chunks == 3  # partial data kept


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param("huge", id="10MB-line"),
        pytest.param(
            b'data: {"choices": [{"delta": {"content": "\xff\xfe"}}]}\n\n', id="invalid-utf8"
        ),
        pytest.param(b"data: " + b"[" * 200_000 + b"\n\n", id="deeply-nested-json"),
    ],
)
def test_hostile_payload_fails_only_that_request_with_bounded_memory(payload: object) -> None:
    good = vllm_stream(TOKENS)
    piece = b"x" * 65536

    def script(ordinal: int):  # type: ignore[no-untyped-def]
        if ordinal != 1:
            yield good
            return
        yield b'data: {"choices": [{"index": 0, "delta": {"content": "a"}}]}\n\n'
        if payload == "huge":
            yield b"data: "
            for _ in range(160):  # 10 MiB without a line end
                yield piece
        else:
            yield payload  # type: ignore[misc]

    tracemalloc.start()
    try:
        with RawServer(script) as srv:
            (w,) = sweep(srv.endpoint, "m", levels=(3,), max_tokens=24)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    statuses = sorted(r.status.value for r in w.requests)
    assert statuses == ["ok", "ok", "protocol_error"], [r.error for r in w.requests]
    # the client never holds the 10 MiB line: one bounded 1 MiB line buffer plus reads
    assert peak < 24 * 1024 * 1024, f"peak traced memory {peak / 1e6:.1f} MB"
