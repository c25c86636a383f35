"""The agent workload's sessions: deterministic, growing by appending, sized as stated; and
what a server's answer to the cache reset is recorded as."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from pydantic import ValidationError

from sparkcap.config import Deployment
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
    ],
)
def test_the_reset_is_recorded_as_the_server_answered(
    answers: dict[str, int], recorded: str
) -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(answers.get(request.url.path, 404))

    assert _reset_with(httpx.MockTransport(handle)) == recorded
