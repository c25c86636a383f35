"""Hostile and oddly delivered streams fail only their own request, with bounded memory."""

from __future__ import annotations

import random
import tracemalloc

import pytest

from tests.integration.reliability.rawserver import RawServer, vllm_stream
from tests.support.queries import q
from tests.support.sims import sweep

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


@pytest.mark.parametrize("n", [1, 5])
def test_a_cut_stream_keeps_exactly_its_n_chunk_timestamps(n: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The server sends n content chunks (each its own read), then drops the connection with no
    finish_reason and no [DONE]: the stored stream is `truncated` with exactly those n chunk
    timestamps, in order, its first/last token times taken from them."""
    import asyncio

    from sparkcap.config.plan import SweepPlan, SweepRequest
    from sparkcap.night.sweeps import run_sweeps
    from tests.support.sims import dep

    events = vllm_stream(TOKENS).split(b"\r\n\r\n")
    head, content = events[:2], events[2 : 2 + n]

    def script(ordinal: int):  # type: ignore[no-untyped-def]
        for ev in head:
            yield ev + b"\r\n\r\n"
        for ev in content:
            yield 0.02
            yield ev + b"\r\n\r\n"
        yield 0.02  # then the connection closes: cut

    db = tmp_path / "cut.duckdb"
    with RawServer(script) as srv:
        plan = SweepPlan(levels=(1,), trials=1, warmup=False, max_tokens=24, max_remeasures=0)
        req = SweepRequest(deployment=dep(srv.endpoint, "m"), workload="code", plan=plan)
        asyncio.run(run_sweeps([req], db))
    ((status, n_chunks, first, last, saw_done),) = q(
        db, "select status, n_chunks, first_token_ns, last_token_ns, saw_done from raw.requests"
    )
    chunks = q(db, "select seq, t_ns, n_chars from raw.chunks order by seq")
    assert (status, n_chunks, saw_done) == ("truncated", n, False)
    assert [c[0] for c in chunks] == list(range(n))
    times = [c[1] for c in chunks]
    # in order; sent 20 ms apart they are separate reads, except where a starved client reads
    # two at once (beside parallel tests and processes at niceness -15): one read, one arrival
    # stamp for both, as a night records it
    assert times == sorted(times)
    assert (first, last) == (times[0], times[-1])
    assert [c[2] for c in chunks] == [len(t) for t in TOKENS[:n]]
