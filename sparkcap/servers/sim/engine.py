"""A model of a continuous-batching LLM serving engine, for tests and the demo fleet: the
loop that admits, prefills and steps every deployment's streams.

It is a test double, not a performance oracle. A deployment is a profile (``sim.profile``);
the formulas a step runs are ``sim.physics``'s; this module is the scheduler that applies
them to requests in time. What it models, and why each part exists:

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
  the shorter the stream (+3 % at 50 tokens with k = 3).
- **Padded batches.** With ``batch_buckets`` a decode step of n streams costs what a step of
  the smallest bucket ≥ n costs, and a padded one ``bucket_pad_slowdown`` more (vLLM's
  CUDA-graph capture sizes): the per-stream rate is not monotone in n, and a level just past
  a bucket edge can fail while larger levels pass.

The parts below exist so that the bottleneck diagnosis can be tested on servers whose
truth is known; each is off unless its profile fields are set.

- **Memory bandwidth.** With ``memory_bandwidth_gb_s`` a decode step is what a real one is on
  a GB10 or any GPU at small batch: memory traffic. It moves the weights it touches
  (``weight_bytes`` of a dense model; of a MoE model ``moe_shared_bytes`` plus the expected
  ``E·(1 − (1 − k/E)^n)`` distinct experts a batch of n touches, times ``moe_expert_bytes``)
  plus every running stream's context × ``kv_bytes_per_token``, at ``bandwidth_efficiency``
  of the peak, plus ``step_overhead_s``; padding and drafts act as above (a step's tokens
  cost the same bytes). ``physics.bandwidth_bound_tok_s`` is the physical bound the diagnosis
  must reproduce: a profile without drafts or overhead decodes at exactly its efficiency
  times it, so "% of the bound" has a known right answer.
- **KV capacity.** With ``kv_capacity_tokens`` admitted requests share a cache of that many
  tokens of context. A request is admitted only when its context and a token for everyone
  fits; when growing streams no longer fit, the most recently admitted request is preempted
  (vLLM's recompute preemption): back to the front of the queue, its KV lost, its prompt and
  generated tokens prefilled again on readmission. Its stream stalls meanwhile, so the level
  whose total context passes the capacity decodes slower and ``preemptions_total`` grows:
  the KV verdict's evidence, which no level below the capacity shows.
- **Acceptance by workload and temperature.** ``physics.base_acceptance``: the workload's
  acceptance times ``1 − temperature_penalty × temperature``, so a probe that sends code at
  prose's temperature knows how much of the code–prose gap temperature explains.
- **Engine-style metrics.** ``metric_style`` makes the server show a deployment's counters
  under vLLM's, SGLang's, llama-server's, TGI's or TensorRT-LLM's own names (each engine's
  real set as its recorded page in ``tests/data/metrics_pages`` shows it, gaps included:
  llama-server's pinned build and TGI have no KV-cache gauge or preemption counter,
  TensorRT-LLM no gauges), so the diagnosis's name map and its "unavailable, not 0" rule are
  tested against each. The queue time a histogram reports is admission − arrival in model
  time (the first admission).

Tokens are counted by the engine and reported in ``usage``; "text" is synthetic.
Faults (short outputs, cut streams, in-band errors, rejections, stalls, missing usage) are
switches on ``profile.SimFaults``, applied to every ``every``-th request of a deployment.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from sparkcap.servers.sim.physics import base_acceptance, decode_step_s
from sparkcap.servers.sim.profile import SimFaults, SimProfile
from sparkcap.servers.sim.text import (
    CHARS_PER_TOKEN,
    CODE_WORDS,
    PROSE_WORDS,
    count_prompt_tokens,
    looks_like_code,
)

# histogram bounds of the engine-style /metrics pages (queue time, TTFT; request lengths)
SECONDS_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
TOKEN_BUCKETS = tuple(float(2**i) for i in range(17))  # 1 .. 65536 tokens
SPEC_ACCEPT_WINDOW_ITERATIONS = 64  # "recently" for sglang:spec_accept_length
MAX_CATCH_UP_S = 1.0  # how far behind its schedule the engine may fall and still catch up


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
    admitted: bool = False  # once admitted: a preempted request's readmission recomputes
    done: bool = False
    arrival_ns: int = 0
    arrival_s: float = 0.0  # model time (the engine's clock)
    admit_seq: int = 0  # order of the latest admission: preemption takes the latest
    first_sent: bool = False


@dataclass(slots=True)
class Histogram:
    """A Prometheus histogram's state: per-bound counts (not cumulative), sum and count."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    sum: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.bounds)

    def observe(self, value: float) -> None:
        self.sum += value
        self.count += 1
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
                break

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations at or below it), +Inf last, as the text format has it."""
        out, running = [], 0
        for bound, n in zip(self.bounds, self.counts, strict=True):
            running += n
            out.append((bound, running))
        out.append((math.inf, self.count))
        return out


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

    def clear(self) -> None:
        self._lru.clear()

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
        self.preemptions_total = 0
        self.finished_total = 0  # requests that ended with a finish reason
        self.queue_time_s = Histogram(SECONDS_BUCKETS)  # admission − arrival, model time
        self.ttft_s = Histogram(SECONDS_BUCKETS)  # first token sent − arrival
        self.request_prompt_tokens = Histogram(TOKEN_BUCKETS)  # per finished request
        self.request_generation_tokens = Histogram(TOKEN_BUCKETS)
        # (decode tokens, stream steps) of recent iterations: sglang's spec_accept_length
        self._recent_steps: deque[tuple[int, int]] = deque(maxlen=SPEC_ACCEPT_WINDOW_ITERATIONS)
        self._admissions = 0
        self._model_t_s: float | None = None  # set by schedule(): model time, not the wall's
        # the simulated GPU's energy: the draw is constant between two meter readings, which
        # are taken wherever the admitted set may change (every iteration, every wake-up)
        self.energy_j = 0.0
        self._metered_at_s = time.perf_counter()
        self._metered_power_w = profile.idle_power_w

    # -- clock and gauges ------------------------------------------------------------------
    def now_s(self) -> float:
        """Model time: the wall clock when serving, the scheduled time inside :meth:`schedule`."""
        return time.perf_counter() if self._model_t_s is None else self._model_t_s

    def power_w(self) -> float:
        """The simulated draw now: idle plus each admitted request's share."""
        return self.p.idle_power_w + self.p.power_per_stream_w * self.n_admitted()

    def meter_energy(self) -> float:
        """Joules drawn since the engine started, brought up to now (the exact integral of
        :meth:`power_w` as far as the admitted set changes only where this is called)."""
        now = time.perf_counter()
        self.energy_j += self._metered_power_w * (now - self._metered_at_s)
        self._metered_at_s = now
        self._metered_power_w = self.power_w()
        return self.energy_j

    def kv_used_tokens(self) -> int:
        """Context held in the KV cache: every admitted request's prompt + generated tokens
        (a prefilling one's reserved in full, as its blocks are allocated at admission)."""
        return sum(r.prompt_tokens + r.generated for r in (*self.running, *self.prefilling))

    def kv_capacity(self) -> int:
        """The KV capacity the usage gauge divides by: ``kv_capacity_tokens``, or (unbounded)
        what ``max_slots`` slots of ``n_ctx`` would hold, so the gauge reads low, not 0."""
        p = self.p
        return p.kv_capacity_tokens if p.kv_capacity_tokens is not None else p.max_slots * p.n_ctx

    def kv_usage(self) -> float:
        """Used KV tokens / capacity, 0..1 (vLLM's kv_cache_usage_perc)."""
        return min(1.0, self.kv_used_tokens() / self.kv_capacity())

    def n_admitted(self) -> int:
        """Requests holding a slot (prefilling or decoding): what engines report as running."""
        return len(self.running) + len(self.prefilling)

    def spec_accept_length(self) -> float:
        """Mean tokens a stream's decode step emitted over recent iterations (1 + accepted
        drafts), 1.0 before any step: SGLang's spec_accept_length."""
        tokens = sum(t for t, _ in self._recent_steps)
        steps = sum(n for _, n in self._recent_steps)
        return tokens / steps if steps else 1.0

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
        base = base_acceptance(p, is_code=req.is_code, temperature=req.temperature)
        spread = p.prompt_acceptance_spread
        req.acceptance = min(0.99, max(0.0, base + req.rng.uniform(-spread, spread)))
        req.stop_at = req.max_tokens
        fault = req.fault
        if fault is not None and fault.short_output_tokens is not None:
            req.stop_at = min(req.stop_at, fault.short_output_tokens)
        req.arrival_ns = time.perf_counter_ns()
        req.arrival_s = self.now_s()
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

    def _kv_fits(self, req: SimRequest) -> bool:
        """Whether admitting ``req`` leaves room for its context and one more token of every
        admitted request (vLLM's can-allocate check, so that an admission is not preempted at
        once). An idle engine admits anything, so a request larger than the cache still runs."""
        cap = self.p.kv_capacity_tokens
        if cap is None or not (self.running or self.prefilling):
            return True
        need = req.prompt_tokens + req.generated + self.n_admitted() + 1
        return self.kv_used_tokens() + need <= cap

    def _admit(self) -> None:
        while self.waiting and len(self.prefilling) + len(self.running) < self.p.max_slots:
            req = self.waiting[0]
            if req.done:
                self.waiting.popleft()
                continue
            if not self._kv_fits(req):
                break  # first come first served: the head of the queue waits for KV
            self.waiting.popleft()
            if req.admitted:  # after a preemption its KV is gone: recompute all of it
                req.prefill_left = req.prompt_tokens + req.generated
            else:
                cached = self.cache.lookup(req.prompt_text) if self.p.prefix_cache else 0
                cached = min(cached, req.prompt_tokens - 1)
                req.cached_tokens = cached
                req.prefill_left = req.prompt_tokens - cached
                self.log[req.request_id].cached_tokens = cached
                req.admitted = True
                self.queue_time_s.observe(self.now_s() - req.arrival_s)
            self._admissions += 1
            req.admit_seq = self._admissions
            self.prefilling.append(req)

    def _preempt_for_kv(self) -> None:
        """Before a decode step: while the admitted requests' context plus one token per
        running stream exceeds ``kv_capacity_tokens``, the most recently admitted request
        leaves (vLLM's recompute preemption) for the front of the queue, losing its KV. The
        last admitted request is never preempted: alone, it has nowhere better to wait."""
        cap = self.p.kv_capacity_tokens
        if cap is None:
            return
        while self.n_admitted() > 1 and self.kv_used_tokens() + len(self.running) > cap:
            victim = max((*self.running, *self.prefilling), key=lambda r: r.admit_seq)
            if victim in self.running:
                self.running.remove(victim)
            else:
                self.prefilling.remove(victim)
            self.waiting.appendleft(victim)
            self.preemptions_total += 1

    # -- the loop ----------------------------------------------------------------------------
    def _decode_step_s(self) -> float:
        context_total = sum(r.prompt_tokens + r.generated for r in self.running)
        return decode_step_s(self.p, len(self.running), context_total)

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
            self.finished_total += 1
            self.request_prompt_tokens.observe(req.prompt_tokens)
            self.request_generation_tokens.observe(req.generated)
            req.out.put_nowait(Emit("finish", finish_reason=reason, n_tokens=req.generated))
            self._retire(req)
        elif req.unsent >= self.p.stream_interval_tokens:
            self._send(req)

    def _send(self, req: SimRequest) -> None:
        n, req.unsent = req.unsent, 0
        if n > 0:
            if not req.first_sent:
                req.first_sent = True
                self.ttft_s.observe(self.now_s() - req.arrival_s)
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
            self.meter_energy()
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
                # hardware. Catching up keeps the designed rate; forgetting the lag would make
                # every stall permanent and read as a slower engine than the profile declares.
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
        self._preempt_for_kv()
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
        step_tokens = step_streams = 0
        for req in list(self.running):
            if req.done:
                continue
            n = self._tokens_this_step(req)
            if n > 0:
                step_tokens += n
                step_streams += 1
                self._generate(req, n)
        if step_streams:
            self._recent_steps.append((step_tokens, step_streams))
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
        t_s = self._model_t_s = 0.0
        for req in requests:
            self._accept(req)
        sent: list[Sent] = []
        while True:
            self._admit()
            if not self.prefilling and not self.running:
                self._model_t_s = None
                return sent
            t_iter, finished_prefill = self._begin_iteration()
            t_s += t_iter
            self._model_t_s = t_s
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
