"""The simulator's stream interval: generated tokens are held and sent k at a time, the first
chunk included, as vLLM's ``--stream-interval`` and buffering proxies do (a server
sending 3 tokens in every chunk makes short trials read 3 % fast).

The engine's chunk sizes are exact (``Engine.schedule`` runs the model without waiting); the
served stream is driven through the ASGI app in-process, no socket.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from sparkcap.servers.sim.engine import Engine, LogEntry, SimRequest
from sparkcap.servers.sim.profile import SimProfile
from sparkcap.servers.sim.routes import create_app
from tests.support.sims import clockwork_profile

STEP_S = 0.02


def _chunks(profile: SimProfile, max_tokens: int) -> list[tuple[float, int]]:
    """(model time s, tokens) of every content chunk one stream is sent."""
    req = SimRequest("r", "write code", max_tokens, 0.0, 0, True, 0)
    sent = Engine(profile).schedule([req])
    assert sent[-1].emit.kind == "finish" and sent[-1].emit.n_tokens == max_tokens
    return [(s.t_s, s.emit.n_tokens) for s in sent if s.emit.kind == "tokens"]


def test_chunks_carry_k_tokens_the_first_included_and_the_rest_at_the_finish() -> None:
    chunks = _chunks(clockwork_profile(STEP_S, stream_interval_tokens=3), max_tokens=10)
    assert [n for _, n in chunks] == [3, 3, 3, 1]  # 10 tokens: the finish sends the 1 left
    # the first token comes from prefill (t = 0), one per 20 ms step after it: the first chunk
    # leaves with the third token, two steps in, and the last with the tenth
    times = [t for t, _ in chunks]
    assert times == pytest.approx([2 * STEP_S, 5 * STEP_S, 8 * STEP_S, 9 * STEP_S])


def test_the_interval_holds_whatever_the_steps_produce() -> None:
    # steps of 2 against an interval of 3: prefill's 1 + 2 = 3 go at once, then 2 are held
    # and the next step makes 4, then 2 + the last 1 (the finish) make 3
    chunks = _chunks(
        clockwork_profile(STEP_S, stream_interval_tokens=3, fixed_chunk_tokens=2), max_tokens=10
    )
    assert [n for _, n in chunks] == [3, 4, 3]
    assert [t for t, _ in chunks] == pytest.approx([STEP_S, 3 * STEP_S, 5 * STEP_S])


def test_with_drafts_every_chunk_but_the_last_has_at_least_k() -> None:
    profile = clockwork_profile(
        STEP_S, stream_interval_tokens=2, draft_tokens=3, acceptance_code=0.7
    )
    sizes = [n for _, n in _chunks(profile, max_tokens=200)]
    assert sum(sizes) == 200
    assert min(sizes[:-1]) >= 2 and max(sizes) <= 2 - 1 + 4  # 1 held + a step of 1 + 3 drafts
    assert len(set(sizes)) > 1  # drafts still vary what a chunk carries
    assert sizes[0] >= 2  # the first token waits for the first decode step


def test_interval_is_bounded() -> None:
    for bad in (0, 65):
        with pytest.raises(ValidationError):
            clockwork_profile(STEP_S, stream_interval_tokens=bad)


async def _served(profile: SimProfile, max_tokens: int) -> tuple[list[dict[str, Any]], LogEntry]:
    app = create_app([profile])
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "write code"}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        r = await client.post("/v1/chat/completions", json=body, timeout=30)
    events = [
        json.loads(line.removeprefix("data: "))
        for line in r.text.splitlines()
        if line.startswith("data: {")
    ]
    engine = app.state.engines["m"]
    (entry,) = engine.log.values()
    return events, entry


# holds the simulator's wall-clock pace to two steps' lateness: with the timing tests, alone
# (a process starved for a tenth of a second at its last chunk breaks the bound)
@pytest.mark.client_timing
def test_served_chunks_count_their_own_tokens_and_the_log_is_of_the_chunks_sent() -> None:
    events, entry = asyncio.run(
        _served(clockwork_profile(STEP_S, stream_interval_tokens=3), max_tokens=10)
    )
    content = [e for e in events if e["choices"] and e["choices"][0]["delta"].get("content")]
    # per-chunk usage counts what each chunk really brought: 3, 3, 3, then the 1 left
    assert [e["usage"]["completion_tokens"] for e in content] == [3, 6, 9, 10]
    assert events[-1]["usage"]["completion_tokens"] == 10
    assert entry.n_chunks == 4 and entry.completion_tokens == 10
    # the server's own first and last token times are its first and last *sent* chunks':
    # step 2 (the third token) and step 9, 7 steps apart where one-token chunks are 9 apart
    # (lateness on a busy machine delays a chunk, never advances it; the engine catches up,
    # so up to two steps of one late last chunk are allowed: still short of one-token
    # chunks' 9 steps, which are never early (half a step is too little in a parallel run); a
    # late *first* chunk shortens the span, by about 0.1 % of it in a full run, so up to one
    # step of that is allowed too)
    assert entry.first_token_ns is not None and entry.last_token_ns is not None
    span_s = (entry.last_token_ns - entry.first_token_ns) / 1e9
    assert 6 * STEP_S <= span_s < 9 * STEP_S * 0.999
    assert entry.decode_tok_s == pytest.approx(9 / span_s)
