"""The agent workload's sessions: deterministic, growing by appending, sized as stated; and
what a server's answer to the cache reset is recorded as."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from pydantic import ValidationError

from sparkcap.config.deployment import Deployment, Timeouts
from sparkcap.config.sessions import SessionShape
from sparkcap.loadgen import cache_reset
from sparkcap.loadgen.sessions import CHARS_PER_TOKEN, build_sessions, system_prompt

SHAPE = SessionShape(turns=4, system_tokens=300, repo_context_tokens=800, answer_tokens=50)


def _chars(messages: tuple[dict[str, str], ...]) -> int:
    return sum(len(m["content"]) for m in messages)


def test_the_same_seed_builds_the_same_sessions_and_another_seed_others() -> None:
    a = build_sessions(SHAPE, 3, "tag")
    assert a == build_sessions(SHAPE, 3, "tag")
    other = build_sessions(SHAPE.model_copy(update={"seed": 1}), 3, "tag")
    assert [s.turns for s in a] != [s.turns for s in other]
    # another wave's sessions share the system prompt only
    b = build_sessions(SHAPE, 3, "other-wave")
    assert a[0].turns[0].messages[0] == b[0].turns[0].messages[0]
    assert a[0].turns[0].messages[1] != b[0].turns[0].messages[1]


def test_every_turn_appends_to_the_previous_one_and_grows_as_stated() -> None:
    (s,) = build_sessions(SHAPE, 1, "t")
    assert len(s.turns) == 4 and s.think_before_s[0] == 0.0
    assert all(0.5 * SHAPE.think_s <= p <= 1.5 * SHAPE.think_s for p in s.think_before_s[1:])
    for prev, nxt in zip(s.turns, s.turns[1:], strict=False):
        # the previous prompt is a prefix of the next: a cache can serve all of it
        assert nxt.messages[: len(prev.messages)] == prev.messages
        assert [m["role"] for m in nxt.messages[len(prev.messages) :]] == ["assistant", "user"]
        grown = _chars(nxt.messages) - _chars(prev.messages)
        want = (SHAPE.answer_tokens + SHAPE.tool_result_tokens) * CHARS_PER_TOKEN
        assert want <= grown <= want + 40
    assert len(system_prompt(SHAPE)) == pytest.approx(SHAPE.system_tokens * CHARS_PER_TOKEN, 0.1)
    assert all(t.max_tokens == SHAPE.answer_tokens for t in s.turns)


def test_a_session_that_cannot_fit_any_model_is_refused() -> None:
    with pytest.raises(ValidationError, match="would reach"):
        SessionShape(turns=64, repo_context_tokens=1_000_000, tool_result_tokens=100_000)
    with pytest.raises(ValidationError):
        SessionShape(turns=0)


def _reset_with(handler: httpx.MockTransport) -> str:
    dep = Deployment(name="d", endpoint="http://127.0.0.1:9/v1", model="m")

    async def go() -> str:
        async with httpx.AsyncClient(transport=handler) as client:
            return await cache_reset._reset(client, dep, {})

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("answers", "recorded"),
    [
        ({"/reset_prefix_cache": 200}, "reset"),
        ({"/reset_prefix_cache": 404, "/flush_cache": 200}, "reset"),
        ({}, "unsupported"),
        ({"/reset_prefix_cache": 500}, "failed: HTTP 500 at /reset_prefix_cache"),
        # llama-server: every listed slot erased; without --slot-save-path it answers 501
        ({"/slots": 200, "/slots/0": 200, "/slots/1": 200}, "reset"),
        ({"/slots": 200, "/slots/0": 501}, "unsupported"),
        ({"/slots": 200, "/slots/0": 200, "/slots/1": 500}, "failed: HTTP 500 at /slots/1"),
    ],
)
def test_the_reset_is_recorded_as_the_server_answered(
    answers: dict[str, int], recorded: str
) -> None:
    erased: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/slots" and path in answers:
            return httpx.Response(200, json=[{"id": 0, "n_ctx": 2048}, {"id": 1}])
        if path.startswith("/slots/"):
            assert request.method == "POST" and request.url.params["action"] == "erase"
            erased.append(path)
        return httpx.Response(answers.get(path, 404))

    assert _reset_with(httpx.MockTransport(handle)) == recorded
    if recorded == "reset" and "/slots" in answers:
        assert erased == ["/slots/0", "/slots/1"]


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'{"id": 0}',
        b'[{"id": true}]',
        b'[{"id": -1}]',
        b'[{"id": 2147483648}]',
        b'[{"id": 0}, {"id": 0}]',
        b'[{"slot": 0}]',
        b"[" + b",".join([b'{"id": 1}'] * 1025) + b"]",
    ],
)
def test_a_hostile_slot_list_is_no_reset_and_erases_nothing(body: bytes) -> None:
    posted: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/slots":
            return httpx.Response(200, content=body)
        if request.method == "POST" and request.url.path.startswith("/slots/"):
            posted.append(request.url.path)
        return httpx.Response(404)

    assert _reset_with(httpx.MockTransport(handle)) == "failed: /slots answered no list of slots"
    assert posted == []


@pytest.mark.reliability
def test_a_reset_answer_that_trickles_or_floods_ends_within_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The whole reset ends within the deployment's deadline, and an answer is read no
    further than 1 MiB: read whole with no total deadline, a 200 trickling a byte every 1.5 s
    would hold a sweep 150-180 s despite `total_s: 10`, and a 400 MiB answer peak at
    1.4 GB."""

    async def trickle() -> AsyncIterator[bytes]:
        for _ in range(1000):
            await asyncio.sleep(0.2)
            yield b" "

    async def flood() -> AsyncIterator[bytes]:
        for _ in range(400):  # 400 MiB if read to the end
            yield b"[" + b" " * ((1 << 20) - 1)

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/reset_prefix_cache":
            return httpx.Response(200, content=trickle() if "slow" in request.url.host else b"")
        return httpx.Response(404)

    def flooding(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/slots":
            return httpx.Response(200, content=flood())
        return httpx.Response(404)

    for transport, host, recorded in [
        (handle, "slow", "failed: no complete answer within 1 s"),
        (flooding, "big", "failed: answer over 1 MiB at /slots"),
    ]:
        monkeypatch.setattr(
            cache_reset,
            "make_client",
            lambda _dep, _n, t=transport: httpx.AsyncClient(transport=httpx.MockTransport(t)),
        )
        dep = Deployment(
            name="d",
            endpoint=f"http://{host}:9/v1",  # type: ignore[arg-type]
            model="m",
            timeouts=Timeouts(total_s=1),
        )
        t0 = time.monotonic()
        assert asyncio.run(cache_reset.reset_prefix_cache(dep, {})) == recorded
        # the trickle unbounded lasts 200 s: 10 s tells a deadline kept from none, whatever
        # else the machine runs
        assert time.monotonic() - t0 < 10
