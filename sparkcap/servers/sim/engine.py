"""A model of a continuous-batching LLM serving engine, for tests and the demo fleet.

It is a test double, not a performance oracle. What it models, and why each part exists:

- **Batched decode.** One engine iteration advances every running stream. The iteration time is
  ``step_s1 * (1 + batch_slowdown * (n - 1)) * (1 + context_slowdown * mean_context / 1000)``,
  so the per-stream rate falls as concurrent streams grow and as their context grows (longer
  outputs are slower, as the study's GLM 400 → 1000-token comparison shows).
- **Speculative decoding.** Each iteration a stream emits ``1 + accepted drafts`` tokens in one
  chunk: up to ``draft_tokens`` drafts, each accepted with probability ``p`` until the first
  rejection (or, with ``acceptance_noise="low"``, the same mean with the least variance).
  ``p`` is higher for code than prose and falls with temperature, so chunks carry several
  tokens and code decodes faster, the effect the study attributes to acceptance.
  Each prompt shifts its own ``p`` slightly, so streams in a wave do not all run alike.
- **Prefill.** A new request's uncached prompt tokens are prefilled in chunks of
  ``prefill_chunk`` tokens at ``prefill_tok_s``, first-come first-served, inside the same
  iterations as decode: a long prompt stretches every iteration while it lasts, stalling the
  other streams (the study: a 32k prompt held decode near 4 tok/s for ~16 s) and making new
  requests wait for their first token.
- **Prefix cache.** Prompts are cut into blocks of ``cache_block_tokens``; a request whose
  leading blocks were prefilled before skips them (``cached_tokens`` in usage).
- **Slots.** At most ``max_slots`` requests are admitted; the rest queue (TTFT grows, decode
  rate does not), like llama.cpp's ``-np``.
- **Stream interval.** With ``stream_interval_tokens`` k > 1 a stream's generated tokens are
  held and sent as one chunk once at least k are unsent, or at the finish (vLLM's
  ``--stream-interval``, buffering proxies): the first chunk too carries k tokens, so a
  stream's first k − 1 tokens are timed by no interval, and the study's rate reads higher
  the shorter the stream (issue 25: +3 % at 50 tokens with k = 3).
- **Padded batches.** With ``batch_buckets`` a decode step of n streams costs what a step of
  the smallest bucket ≥ n costs, and a padded one ``bucket_pad_slowdown`` more (vLLM's
  CUDA-graph capture sizes): the per-stream rate is not monotone in n, and a level just past
  a bucket edge can fail while larger levels pass.

Tokens are counted by the engine and reported in ``usage``; "text" is synthetic.
Faults (short outputs, cut streams, in-band errors, rejections, stalls, missing usage) are
switches on :class:`SimFaults`, applied to every ``every``-th request of a deployment.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import math
import random
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

CHARS_PER_TOKEN = 4
MAX_CATCH_UP_S = 1.0  # how far behind its schedule the engine may fall and still catch up
CODE_WORDS = (
    "def ",
    "return ",
    "self",
    ".",
    "(",
    ")",
    ":",
    "\n    ",
    "for ",
    "in ",
    "if ",
    "else",
    "x",
    "value",
    "items",
    "=",
    "+",
    "1",
    "None",
    "key",
    "[",
    "]",
    ", ",
    "import ",
    "class ",
)
PROSE_WORDS = (
    "the ",
    "light",
    "house ",
    "and ",
    "of ",
    "a ",
    "river ",
    "was ",
    "in ",
    "that ",
    "to ",
    "with ",
    "morning ",
    "slowly ",
    "town ",
    ", ",
    ". ",
    "people ",
    "long ",
    "sea ",
    "it ",
)


class SimFaults(BaseModel):
    """Misbehaviour switches; each applies to requests ``i`` with ``i % every == every - 1``."""

    model_config = ConfigDict(extra="forbid")

    every: int = Field(1, ge=1)
    short_output_tokens: int | None = Field(
        None, ge=1, description="end with finish_reason=stop after this many tokens"
    )
    cut_after_tokens: int | None = Field(None, ge=0, description="drop the connection")
    end_without_done_after_tokens: int | None = Field(
        None, ge=0, description="end cleanly, no [DONE], no finish_reason"
    )
    error_after_tokens: int | None = Field(None, ge=0, description="in-band error event")
    stall_after_tokens: int | None = Field(None, ge=0, description="stop sending, keep open")
    trickle_interval_s: float | None = Field(None, gt=0, description="one token per interval")
    reject_status: Literal[429, 503] | None = None
    retry_after_s: int = 7
    omit_usage: bool = False


class SimProfile(BaseModel):
    """One simulated deployment. Rates are set by :func:`calibrated` in ``sim.fleet``."""

    model_config = ConfigDict(extra="forbid")

    model: str
    step_s1: float = Field(0.05, gt=0, description="decode iteration at batch 1, seconds")
    batch_slowdown: float = Field(0.2, ge=0)
    context_slowdown: float = Field(0.03, ge=0, description="per 1000 tokens of mean context")
    draft_tokens: int = Field(3, ge=0)
    acceptance_code: float = Field(0.8, ge=0, le=0.99)
    acceptance_prose: float = Field(0.6, ge=0, le=0.99)
    temperature_penalty: float = Field(0.0, ge=0, le=1)
    prompt_acceptance_spread: float = Field(0.04, ge=0, le=0.5)
    acceptance_noise: Literal["geometric", "low"] = Field(
        "geometric",
        description="geometric: drafts accepted one by one; low: the same mean tokens per step "
        "with the least variance (stable headline numbers from short demo outputs)",
    )
    fixed_chunk_tokens: int | None = Field(None, ge=1)
    prefill_tok_s: float = Field(4000.0, gt=0)
    prefill_chunk: int = Field(2048, ge=1)
    max_slots: int = Field(256, ge=1)
    prefix_cache: bool = True
    cache_block_tokens: int = Field(64, ge=1)
    cache_capacity_tokens: int = Field(1_000_000, ge=0)
    stream_interval_tokens: int = Field(
        1,
        ge=1,
        le=64,
        description="tokens held until at least this many are unsent, then sent as one chunk "
        "(and the rest at the finish), the first chunk included: vLLM's --stream-interval and "
        "buffering proxies, whose first k - 1 tokens no chunk interval times",
    )
    batch_buckets: list[int] | None = Field(
        None,
        description="batch sizes a decode step runs at (ascending): n streams cost a step of "
        "the smallest bucket >= n (n itself past the largest), like vLLM's CUDA-graph capture "
        "sizes, which pad 5 streams to 8 and 10 to 16; None: every n runs at n",
    )
    bucket_pad_slowdown: float = Field(
        0.0,
        ge=0,
        description="a padded step (n below its bucket) costs (1 + this) times the bucket's "
        "step: the 17-25 % dips reported on DGX Spark at padded sizes, so that a level just "
        "past a bucket edge is slower than the bucket itself",
    )
    seed: int = 0
    faults: SimFaults = Field(default_factory=lambda: SimFaults())

    @field_validator("batch_buckets")
    @classmethod
    def _ascending_buckets(cls, v: list[int] | None) -> list[int] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("batch_buckets must name at least one size (or be left out)")
        if any(b < 1 for b in v):
            raise ValueError(f"batch_buckets must be positive, got {v}")
        if any(a >= b for a, b in itertools.pairwise(v)):
            raise ValueError(f"batch_buckets must be strictly ascending, got {v}")
        return v

    def padded_batch(self, n_streams: int) -> int:
        """The batch a step of ``n_streams`` runs at: its bucket, or itself past the last."""
        for bucket in self.batch_buckets or ():
            if bucket >= n_streams:
                return bucket
        return n_streams


def count_prompt_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def looks_like_code(text: str) -> bool:
    t = text.lower()
    return "python" in t or "code" in t or "function" in t or "implement" in t


@dataclass(slots=True)
class Emit:
    """One message from the engine to a response stream."""

    kind: Literal["tokens", "finish", "cut", "end_no_done", "error", "stall"]
    text: str = ""
    n_tokens: int = 0
    finish_reason: str | None = None


@dataclass(slots=True)
class SimRequest:
    request_id: str
    prompt_text: str
    max_tokens: int
    temperature: float
    min_tokens: int
    ignore_eos: bool
    ordinal: int
    prompt_tokens: int = 0
    cached_tokens: int = 0
    prefill_left: int = 0
    generated: int = 0
    unsent: int = 0  # generated tokens held back by the stream interval
    acceptance: float = 0.0
    is_code: bool = False
    stop_at: int = 0
    fault: SimFaults | None = None
    rng: random.Random = field(default_factory=random.Random)
    out: asyncio.Queue[Emit] = field(default_factory=asyncio.Queue)
    admitted: bool = False
    done: bool = False
    arrival_ns: int = 0


@dataclass(slots=True)
class LogEntry:
    """The server's own record of a stream: when it *sent* the first and last token."""

    request_id: str
    model: str
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int = 0
    first_token_ns: int | None = None
    last_token_ns: int | None = None
    n_chunks: int = 0
    finish_reason: str | None = None

    @property
    def decode_tok_s(self) -> float | None:
        if self.first_token_ns is None or self.last_token_ns is None:
            return None
        if self.completion_tokens < 2 or self.last_token_ns <= self.first_token_ns:
            return None
        return (self.completion_tokens - 1) / ((self.last_token_ns - self.first_token_ns) / 1e9)


class PrefixCache:
    """LRU of prompt blocks keyed by the hash of everything up to and including the block."""

    def __init__(self, block_tokens: int, capacity_tokens: int) -> None:
        self.block_chars = block_tokens * CHARS_PER_TOKEN
        self.block_tokens = block_tokens
        self.capacity_blocks = capacity_tokens // max(block_tokens, 1)
        self._lru: OrderedDict[bytes, None] = OrderedDict()

    def _keys(self, text: str) -> list[bytes]:
        h = hashlib.blake2b(digest_size=16)
        keys = []
        for i in range(len(text) // self.block_chars):
            h.update(text[i * self.block_chars : (i + 1) * self.block_chars].encode())
            keys.append(h.copy().digest())
        return keys

    def lookup(self, text: str) -> int:
        n = 0
        for k in self._keys(text):
            if k not in self._lru:
                break
            self._lru.move_to_end(k)
            n += 1
        return n * self.block_tokens

    def insert(self, text: str) -> None:
        for k in self._keys(text):
            self._lru[k] = None
            self._lru.move_to_end(k)
        while len(self._lru) > self.capacity_blocks:
            self._lru.popitem(last=False)


class Engine:
    """The per-deployment scheduler loop; runs inside the server's event loop."""

    def __init__(self, profile: SimProfile) -> None:
        self.p = profile
        self.waiting: deque[SimRequest] = deque()
        self.prefilling: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.cache = PrefixCache(profile.cache_block_tokens, profile.cache_capacity_tokens)
        self.log: dict[str, LogEntry] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._ordinal = 0
        # counters exposed on /metrics
        self.requests_total = 0
        self.rejected_total = 0
        self.generated_tokens_total = 0
        self.prompt_tokens_total = 0
        self.drafted_total = 0
        self.accepted_total = 0
        self.iterations_total = 0

    # -- admission -------------------------------------------------------------------------
    def fault_for(self, ordinal: int) -> SimFaults | None:
        f = self.p.faults
        return f if ordinal % f.every == f.every - 1 else None

    def next_ordinal(self) -> int:
        o = self._ordinal
        self._ordinal += 1
        return o

    def submit(self, req: SimRequest) -> None:
        self._accept(req)
        self._ensure_running()
        self._wake.set()

    def _accept(self, req: SimRequest) -> None:
        p = self.p
        req.prompt_tokens = count_prompt_tokens(req.prompt_text)
        req.is_code = looks_like_code(req.prompt_text)
        seed = int.from_bytes(
            hashlib.blake2b(f"{p.seed}|{req.prompt_text}".encode(), digest_size=8).digest(), "big"
        )
        req.rng = random.Random(seed)
        base = p.acceptance_code if req.is_code else p.acceptance_prose
        base *= 1.0 - p.temperature_penalty * req.temperature
        spread = p.prompt_acceptance_spread
        req.acceptance = min(0.99, max(0.0, base + req.rng.uniform(-spread, spread)))
        req.stop_at = req.max_tokens
        fault = req.fault
        if fault is not None and fault.short_output_tokens is not None:
            req.stop_at = min(req.stop_at, fault.short_output_tokens)
        req.arrival_ns = time.perf_counter_ns()
        self.requests_total += 1
        self.prompt_tokens_total += req.prompt_tokens
        self.log[req.request_id] = LogEntry(req.request_id, p.model, req.prompt_tokens, 0)
        self.waiting.append(req)

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())

    def cancel(self, req: SimRequest) -> None:
        req.done = True
        for q in (self.waiting, self.prefilling):
            if req in q:
                q.remove(req)
        if req in self.running:
            self.running.remove(req)

    def _admit(self) -> None:
        while self.waiting and len(self.prefilling) + len(self.running) < self.p.max_slots:
            req = self.waiting.popleft()
            if req.done:
                continue
            cached = self.cache.lookup(req.prompt_text) if self.p.prefix_cache else 0
            cached = min(cached, req.prompt_tokens - 1)
            req.cached_tokens = cached
            req.prefill_left = req.prompt_tokens - cached
            self.log[req.request_id].cached_tokens = cached
            req.admitted = True
            self.prefilling.append(req)

    # -- the loop ----------------------------------------------------------------------------
    def _decode_step_s(self) -> float:
        p = self.p
        n = len(self.running)
        ctx = sum(r.prompt_tokens + r.generated for r in self.running) / n
        batch = p.padded_batch(n)
        step_s = (
            p.step_s1 * (1 + p.batch_slowdown * (batch - 1)) * (1 + p.context_slowdown * ctx / 1000)
        )
        if batch > n:
            step_s *= 1 + p.bucket_pad_slowdown
        return step_s

    def _tokens_this_step(self, req: SimRequest) -> int:
        p = self.p
        if p.fixed_chunk_tokens is not None:
            k = p.fixed_chunk_tokens
        elif p.acceptance_noise == "low":
            mean = sum(req.acceptance**j for j in range(p.draft_tokens + 1))
            k = int(mean)
            if req.rng.random() < mean - k:
                k += 1
            self.drafted_total += p.draft_tokens
            self.accepted_total += k - 1
        else:
            k = 1
            for _ in range(p.draft_tokens):
                self.drafted_total += 1
                if req.rng.random() < req.acceptance:
                    k += 1
                    self.accepted_total += 1
                else:
                    break
        return min(k, req.stop_at - req.generated)

    def _text(self, req: SimRequest, n: int) -> str:
        words = CODE_WORDS if req.is_code else PROSE_WORDS
        return "".join(words[req.rng.randrange(len(words))] for _ in range(n))

    def _generate(self, req: SimRequest, n: int) -> None:
        """``n`` tokens generated for ``req``: sent at once, or held until the stream interval
        has ``stream_interval_tokens`` unsent (whatever the steps produced: a step of 4 tokens
        against an interval of 3 goes out as a chunk of 4). A finish or a fault sends what is
        held first, so every chunk's count is the tokens it carries."""
        req.generated += n
        req.unsent += n
        self.generated_tokens_total += n
        f = req.fault
        if f is not None:
            for attr, kind in (
                ("cut_after_tokens", "cut"),
                ("end_without_done_after_tokens", "end_no_done"),
                ("error_after_tokens", "error"),
                ("stall_after_tokens", "stall"),
            ):
                limit = getattr(f, attr)
                if limit is not None and req.generated >= limit:
                    self._send(req)
                    req.out.put_nowait(Emit(kind))  # type: ignore[arg-type]
                    self._retire(req)
                    return
        if req.generated >= req.stop_at:
            self._send(req)
            reason = "length" if req.generated >= req.max_tokens else "stop"
            req.out.put_nowait(Emit("finish", finish_reason=reason, n_tokens=req.generated))
            self._retire(req)
        elif req.unsent >= self.p.stream_interval_tokens:
            self._send(req)

    def _send(self, req: SimRequest) -> None:
        n, req.unsent = req.unsent, 0
        if n > 0:
            req.out.put_nowait(Emit("tokens", self._text(req, n), n))

    def _retire(self, req: SimRequest) -> None:
        req.done = True
        if req in self.running:
            self.running.remove(req)

    async def _loop(self) -> None:
        try:
            await self._iterate_forever()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a model bug must fail the streams, never hang them
            import traceback

            traceback.print_exc()
            for req in [*self.waiting, *self.prefilling, *self.running]:
                req.out.put_nowait(Emit("error", text=f"engine failure: {exc!r}"))
                req.done = True
            self.waiting.clear()
            self.prefilling.clear()
            self.running.clear()

    async def _iterate_forever(self) -> None:
        loop_deadline = time.perf_counter()
        while True:
            self._admit()
            if not self.prefilling and not self.running:
                self._wake.clear()
                if not self.waiting:
                    await self._wake.wait()
                loop_deadline = time.perf_counter()
                continue
            t_iter, finished_prefill = self._begin_iteration()
            loop_deadline += t_iter
            delay = loop_deadline - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                # Late: this process was starved (a busy shared machine), not the simulated
                # hardware. Catching up keeps the designed rate; forgetting the lag made every
                # stall permanent and the twin's knife-edge levels read 5-10 % slow under load.
                # Only a lag past MAX_CATCH_UP_S (a paused process) is forgotten, so a resumed
                # engine does not burst a long backlog.
                if -delay > MAX_CATCH_UP_S:
                    loop_deadline = time.perf_counter()
                await asyncio.sleep(0)
            self._end_iteration(finished_prefill)

    def _begin_iteration(self) -> tuple[float, list[SimRequest]]:
        """This iteration's prefill, first come first served within its budget: how long the
        iteration takes (prefill plus one decode step of the running streams) and whose
        prefill it completes."""
        p = self.p
        budget = p.prefill_chunk
        finished_prefill: list[SimRequest] = []
        prefilled = 0
        for req in list(self.prefilling):
            if budget <= 0:
                break
            take = min(budget, req.prefill_left)
            req.prefill_left -= take
            budget -= take
            prefilled += take
            if req.prefill_left == 0:
                finished_prefill.append(req)
        t_iter = prefilled / p.prefill_tok_s
        if self.running:
            t_iter += self._decode_step_s()
        return t_iter, finished_prefill

    def _end_iteration(self, finished_prefill: list[SimRequest]) -> None:
        """What the iteration produced, at its end: a step for every running stream, the
        first token of every stream whose prefill it completed."""
        self.iterations_total += 1
        for req in list(self.running):
            if req.done:
                continue
            n = self._tokens_this_step(req)
            if n > 0:
                self._generate(req, n)
        for req in finished_prefill:
            if req in self.prefilling:
                self.prefilling.remove(req)
            if req.done:
                continue
            if self.p.prefix_cache:
                self.cache.insert(req.prompt_text)
            self.running.append(req)
            self._generate(req, 1)  # prefill produces the first token

    def schedule(self, requests: Sequence[SimRequest]) -> list[Sent]:
        """Every chunk the engine would send ``requests``, all arriving at once, in model time
        and without waiting for it: the model's own answer (chunk sizes, send times, so the
        study's rate of each stream), which tests and benchmarks compare with what a served
        run measured. Only for an engine that serves nothing else."""
        for req in requests:
            self._accept(req)
        sent: list[Sent] = []
        t_s = 0.0
        while True:
            self._admit()
            if not self.prefilling and not self.running:
                return sent
            t_iter, finished_prefill = self._begin_iteration()
            t_s += t_iter
            self._end_iteration(finished_prefill)
            for req in requests:
                while not req.out.empty():
                    sent.append(Sent(t_s, req.request_id, req.out.get_nowait()))


@dataclass(frozen=True, slots=True)
class Sent:
    """One message of :meth:`Engine.schedule`: when (seconds of model time) and to whom."""

    t_s: float
    request_id: str
    emit: Emit
