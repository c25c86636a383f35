"""The ``agent`` workload: synthetic coding-agent sessions, each turn a recorded stream.

A level of this workload is a number of concurrent *sessions*. A wave releases every session's
first turn at one instant (the sweep's synchronized release), then each session goes on by
itself: after an answer ends, the agent thinks (a seeded pause), appends the answer and a tool
result, and sends the next turn on the same connection. Every turn is an ordinary stream in
``raw.requests`` with its ``session_id`` and ``turn_index``; dbt judges the level from all its
turns (median decode rate, and the TTFT at ``ttft_quantile`` against ``ttft_ceiling_s``).

Why the appended "answer" is a stand-in of the planned length, not the text the server sent:
the sessions must be deterministic from a seed (two nights send the same prompts), and a
server's text is untrusted input that would make every later prompt depend on it. The server
cannot have cached a stand-in, so the prefix a turn should find cached is the previous turn's
prompt (dbt: ``int_session_turns``), which is what a real agent's cache hit is at least.

What is shared and what is not: the system prompt with the tool definitions is the same for
every session of every wave (as in production, where it is always warm unless the cache was
reset); the repository context carries the wave's tag, so sessions never share more than that
and no wave finds another wave's sessions cached.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from sparkcap.config.sessions import SessionShape
from sparkcap.loadgen.client import stream_request
from sparkcap.loadgen.connections import StreamClients
from sparkcap.loadgen.records import WaveRecord
from sparkcap.loadgen.wave import (
    WaveTarget,
    build_body,
    new_request,
    prepare_streams,
    release_streams,
    settle_wave,
    token_ceiling,
)
from sparkcap.loadgen.workloads import StreamSpec, prompts, temperature

CHARS_PER_TOKEN = 4  # sizes text before the server counts it; usage is what gets stored
THINK_JITTER = 0.5  # a pause is think_s × (1 ± this), seeded: sessions do not march in step
_CODE_WORDS = (
    "def",
    "return",
    "self",
    "items",
    "value",
    "key",
    "index",
    "result",
    "config",
    "import",
    "class",
    "yield",
    "async",
    "await",
    "raise",
    "None",
    "True",
    "len",
    "range",
    "dict",
)
_TOOLS = (
    "read_file(path: str) -> str: the text of a file of the repository",
    "write_file(path: str, text: str) -> None: replace a file of the repository",
    "run_tests(selector: str) -> str: run pytest on the selector, return its output",
    "grep(pattern: str) -> list[str]: lines of the repository matching the pattern",
)


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """One session: its turns' requests in order and the pause before each later turn."""

    session_id: str
    turns: tuple[StreamSpec, ...]
    think_before_s: tuple[float, ...]  # one per turn; the first is 0 (it is released)


def _filler(rng: random.Random, tokens: int, line: str) -> str:
    """Code-like text of about ``tokens`` tokens (four characters a token)."""
    out: list[str] = []
    size = 0
    target = tokens * CHARS_PER_TOKEN
    while size < target:
        words = " ".join(rng.choice(_CODE_WORDS) for _ in range(8))
        text = f"{line}{words}\n"
        out.append(text)
        size += len(text)
    return "".join(out)[:target]


def system_prompt(shape: SessionShape) -> str:
    """The prompt and tool definitions every session shares (the same in every wave)."""
    head = (
        "You are a coding agent working in a Python repository. Call a tool by answering "
        "with one line `TOOL name(args)`; otherwise answer with code.\nTools:\n"
        + "\n".join(f"- {t}" for t in _TOOLS)
        + "\n"
    )
    rng = random.Random(f"system/{shape.seed}")
    rest = max(0, shape.system_tokens - len(head) // CHARS_PER_TOKEN)
    return head + _filler(rng, rest, "# style: ")


def build_sessions(shape: SessionShape, n_sessions: int, wave_tag: str) -> list[SessionSpec]:
    """``n_sessions`` sessions of ``shape``; the same arguments always build the same ones."""
    tasks = prompts("code")
    temp = temperature("code")
    system = {"role": "system", "content": system_prompt(shape)}
    out: list[SessionSpec] = []
    for i in range(n_sessions):
        rng = random.Random(f"{shape.seed}/{wave_tag}/{i}")
        task = tasks[i % len(tasks)]
        repo = _filler(rng, shape.repo_context_tokens, f"# {wave_tag}/{i} src/module.py: ")
        messages: list[dict[str, str]] = [
            system,
            {"role": "user", "content": f"[{wave_tag}/{i}] Repository:\n{repo}\nTask: {task}"},
        ]
        turns: list[StreamSpec] = []
        pauses: list[float] = []
        for k in range(shape.turns):
            if k:
                answer = _filler(rng, shape.answer_tokens, "")
                result = _filler(rng, shape.tool_result_tokens, "$ ")
                messages = [
                    *messages,
                    {"role": "assistant", "content": answer},
                    {"role": "user", "content": f"Tool result:\n{result}\nContinue."},
                ]
            pauses.append(
                0.0 if k == 0 else shape.think_s * (1 + THINK_JITTER * (2 * rng.random() - 1))
            )
            turns.append(
                StreamSpec(
                    prompt_id=f"agent-{i % len(tasks) + 1:02d}/turn{k}",
                    messages=tuple(messages),
                    max_tokens=shape.answer_tokens,
                    temperature=temp,
                )
            )
        out.append(SessionSpec(f"s{i:03d}", tuple(turns), tuple(pauses)))
    return out


async def run_session_wave(
    clients: StreamClients,
    *,
    wave: WaveRecord,
    target: WaveTarget,
    sessions: Sequence[SessionSpec],
    sleep: Any = None,
) -> WaveRecord:
    """Release every session's first turn together, then let each session run its turns.

    A turn is never retried and a session goes on after a failed turn (the agent would send
    its next turn anyway): every turn is a finding. ``sleep`` is ``asyncio.sleep`` unless a
    test replaces it.
    """
    pause = sleep or asyncio.sleep
    first = [s.turns[0] for s in sessions]
    bodies, per_request = prepare_streams(wave, first, target)
    for rec, s in zip(wave.requests, sessions, strict=True):
        rec.session_id = f"{wave.wave_id}/{s.session_id}"
        rec.turn_index = 0
    records = wave.requests

    async def later_turns(i: int) -> None:
        session = sessions[i]
        for k in range(1, len(session.turns)):
            await pause(session.think_before_s[k])
            spec = session.turns[k]
            rec = new_request(f"{wave.wave_id}/s{i:03d}/turn{k:02d}", i, spec, target.extra_body)
            rec.session_id = f"{wave.wave_id}/{session.session_id}"
            rec.turn_index = k
            body = build_body(spec, wave.model, target.continuous_usage, target.extra_body)
            rec.token_ceiling = token_ceiling(body)
            records.append(rec)
            await stream_request(
                clients[i],
                target.url,
                orjson.dumps(body),
                target.headers_for(rec.request_id),
                rec,
                wave.anchor_perf_ns,
                target.total_timeout_s,
                trace=clients.trace(i),
            )

    timing = await release_streams(
        clients,
        url=target.url,
        bodies=bodies,
        headers=per_request,
        records=records,
        anchor_perf_ns=wave.anchor_perf_ns,
        total_timeout_s=target.total_timeout_s,
        follow_up=later_turns,
    )
    return settle_wave(wave, [timing])
