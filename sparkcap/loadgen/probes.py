"""The study's probes: long prefills, prompt caches, output length, mixed load and the
code–prose gap's attribution.

Every probe records ordinary requests and chunks against a wave anchor, so the warehouse and
dbt treat them like sweeps; ``raw.waves.probe`` names the probe and ``raw.requests.role`` says
what each request was for. Long prompts are built to a target token count with the server's
own tokenizer where it has one (``/tokenize`` on llama.cpp and vLLM), otherwise estimated at
four characters per token, and the actual ``prompt_tokens`` from usage is what gets stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import httpx

from sparkcap.config.base import MAX_TOKENS
from sparkcap.config.deployment import Deployment
from sparkcap.config.probes import (
    ContextLadderOptions,
    GapAttributionOptions,
    MixedOptions,
    OutputLengthOptions,
    PrefillInterferenceOptions,
    PromptCacheOptions,
)
from sparkcap.loadgen.client import stream_request
from sparkcap.loadgen.connections import StreamClients, make_client
from sparkcap.loadgen.discover import discover_facts
from sparkcap.loadgen.records import RequestRecord, Status, WaveRecord, is_count
from sparkcap.loadgen.sweep import request_headers
from sparkcap.loadgen.wave import LoopMonitor, build_body, run_wave, token_ceiling, wave_target
from sparkcap.loadgen.workloads import (
    CODE_TOKENS,
    StreamSpec,
    build_streams,
    required_length,
    temperature,
)

WORDS = [
    "river",
    "harbour",
    "lantern",
    "granite",
    "meadow",
    "orchard",
    "copper",
    "willow",
    "thunder",
    "saffron",
    "glacier",
    "compass",
    "velvet",
    "ember",
    "prairie",
    "beacon",
    "cobalt",
    "maple",
    "falcon",
    "quarry",
    "harvest",
    "tundra",
    "marble",
    "cascade",
    "juniper",
    "horizon",
    "anchor",
    "pepper",
    "lagoon",
    "summit",
]
CHARS_PER_TOKEN_GUESS = 4


async def count_tokens(client: httpx.AsyncClient, dep: Deployment, text: str) -> int | None:
    """The server's token count for ``text``, or ``None`` if it offers no tokenizer (or
    answers with something that is no count)."""
    url = dep.server_url("tokenize")
    for body in ({"content": text}, {"model": dep.model, "prompt": text}):
        try:
            r = await client.post(url, json=body, headers=request_headers(dep))
        except httpx.HTTPError:
            return None
        if r.status_code != 200:
            continue
        try:
            data = r.json()
        except (ValueError, RecursionError):
            return None
        if not isinstance(data, dict):
            return None
        count = data.get("count")
        if is_count(count):
            return count
        if isinstance(data.get("tokens"), list):
            return len(data["tokens"])
    return None


async def document(
    client: httpx.AsyncClient, dep: Deployment, target_tokens: int, seed: str
) -> tuple[str, int | None]:
    """Distinct filler text of about ``target_tokens`` tokens (server-counted if possible)."""
    rng = random.Random(seed)
    words = [rng.choice(WORDS) for _ in range(max(8, target_tokens))]

    def text() -> str:
        return f"[document {seed}] " + " ".join(words)

    counted = await count_tokens(client, dep, text())
    if counted is None:  # no tokenizer: size by characters, usage will tell the truth
        while len(text()) < target_tokens * CHARS_PER_TOKEN_GUESS:
            words.append(rng.choice(WORDS))
        return text(), None
    for _ in range(4):
        if abs(counted - target_tokens) <= max(16, target_tokens // 100):
            break
        if not len(text()) // 32 <= counted <= len(text()):
            # no tokenizer counts a token per 32 characters or more than one per character:
            # a count like that is no size, so usage will tell the truth instead
            return text(), None
        # a step at most ×4 either way, and never past a few times the target (memory bound)
        ratio = min(4.0, max(0.25, target_tokens / max(counted, 1)))
        keep = min(max(8, int(len(words) * ratio)), 4 * max(8, target_tokens))
        while len(words) < keep:
            words.append(rng.choice(WORDS))
        del words[keep:]
        counted = await count_tokens(client, dep, text()) or counted
    return text(), counted


def _spec(prompt_id: str, text: str, max_tokens: int, temperature: float = 0.0) -> StreamSpec:
    return StreamSpec(
        prompt_id=prompt_id,
        messages=({"role": "user", "content": text},),
        max_tokens=max_tokens,
        temperature=temperature,
    )


def _probe_wave(
    dep: Deployment,
    run_id: str,
    probe: str,
    workload: str,
    concurrency: int,
    trial: int = 1,
    label: str | None = None,
) -> WaveRecord:
    """A probe's wave at ``dep``, anchored now. Its id names the probe, the ``label`` of one
    wave among the probe's several, the concurrency and the trial."""
    step = probe if label is None else f"{probe}/{label}"
    return WaveRecord(
        wave_id=f"{run_id}/{dep.name}/{step}/c{concurrency:04d}/t{trial}",
        run_id=run_id,
        deployment=dep.name,
        model=dep.model,
        endpoint=str(dep.endpoint),
        workload=workload,
        concurrency=concurrency,
        trial=trial,
        started_at_ns=time.time_ns(),
        anchor_perf_ns=time.perf_counter_ns(),
        probe=probe,
    )


class _Probe:
    """Shared bookkeeping: one anchor, requests appended as they are sent."""

    def __init__(
        self, dep: Deployment, run_id: str, probe: str, workload: str, concurrency: int
    ) -> None:
        self.dep = dep
        self.wave = _probe_wave(dep, run_id, probe, workload, concurrency)
        self.headers = request_headers(dep)

    async def send(
        self,
        client: httpx.AsyncClient,
        spec: StreamSpec,
        role: str,
        scheduled_ns: int | None = None,
        total_s: float | None = None,
    ) -> RequestRecord:
        i = len(self.wave.requests)
        rec = RequestRecord(
            request_id=f"{self.wave.wave_id}/s{i:03d}",
            stream_index=i,
            prompt_id=spec.prompt_id,
            requested_tokens=spec.max_tokens,
            required_tokens=spec.max_tokens,
            temperature=spec.temperature,
        )
        rec.role = role
        rec.scheduled_ns = scheduled_ns
        self.wave.requests.append(rec)
        body = build_body(spec, self.dep.model, self.dep.continuous_usage, self.dep.extra_body)
        rec.token_ceiling = token_ceiling(body)
        return await stream_request(
            client,
            self.dep.chat_url,
            body,
            {**self.headers, "X-Request-Id": rec.request_id},
            rec,
            self.wave.anchor_perf_ns,
            self.dep.timeouts.total_s if total_s is None else total_s,
        )

    def finish(self, monitor: LoopMonitor) -> WaveRecord:
        w = self.wave
        w.duration_s = (time.perf_counter_ns() - w.anchor_perf_ns) / 1e9
        w.loop_lag_p99_ms = monitor.lag_p99_ms
        # as a sweep's wave has it: the longest the client was held back, which a probe's
        # TTFT and dip windows carry as if the server had taken it
        w.loop_lag_max_ms = monitor.lag_max_ms
        w.client_cpu_pct = monitor.cpu_pct
        return w


async def _until_decoding(
    wave: WaveRecord, tasks: Sequence[asyncio.Task[Any]], n: int, limit_s: float
) -> None:
    """Wait until all ``n`` background streams have their first token (or ended), bounded."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and not all(t.done() for t in tasks):
        bg = [r for r in wave.requests if r.role == "background"]
        if len(bg) >= n and all(r.first_token_ns is not None or r.end_ns is not None for r in bg):
            break
        await asyncio.sleep(0.01)


async def prefill_interference(
    dep: Deployment, run_id: str, options: PrefillInterferenceOptions
) -> WaveRecord:
    """Hold N decode streams; once steady, inject one long uncached prompt; meanwhile send
    short probe requests at a fixed interval. Roles: ``background``, ``long``, ``probe``."""
    background_streams = options.background_streams
    background_tokens = options.background_tokens
    long_prompt_tokens = options.long_prompt_tokens
    settle_s = options.settle_s
    probe_interval_s = options.probe_interval_s
    probe_tokens = options.probe_tokens
    tail_s = options.tail_s
    p = _Probe(dep, run_id, "prefill-interference", "code", background_streams)
    monitor = LoopMonitor()
    async with make_client(dep, background_streams + 64) as client:
        doc, _ = await document(client, dep, long_prompt_tokens, secrets.token_hex(6))
        specs = build_streams(
            "code", background_streams, f"{run_id[-6:]}-pi", max_tokens=background_tokens
        )
        monitor.start()
        background = [asyncio.create_task(p.send(client, s, "background")) for s in specs]
        probes: list[asyncio.Task[RequestRecord]] = []
        stop_probes = asyncio.Event()

        async def prober() -> None:
            k = 0
            while not stop_probes.is_set():
                probes.append(
                    asyncio.create_task(
                        p.send(
                            client,
                            _spec(
                                f"probe-{k}",
                                f"[probe {secrets.token_hex(4)}] Say hi.",
                                probe_tokens,
                            ),
                            "probe",
                        )
                    )
                )
                k += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop_probes.wait(), probe_interval_s)

        prober_task = asyncio.create_task(prober())
        # "steady" means every background stream is decoding: on a slow or busy server their
        # own prefill can take longer than settle_s, and a long prompt injected before they
        # decode leaves no "before" window to compare against
        await _until_decoding(p.wave, background, background_streams, dep.timeouts.total_s)
        await asyncio.sleep(settle_s)
        long_rec = await p.send(
            client, _spec("long-prompt", doc + "\nSummarise in one line.", 4), "long"
        )
        await asyncio.sleep(tail_s)
        stop_probes.set()
        await prober_task
        await asyncio.gather(*background, *probes)
        await monitor.stop()
    del long_rec
    return p.finish(monitor)


async def prompt_cache(dep: Deployment, run_id: str, options: PromptCacheOptions) -> WaveRecord:
    """Send a long document cold, then with other questions (warm), then a distinct document
    of the same size (control). Roles: ``cold``, ``warm``, ``control``."""
    document_tokens = options.document_tokens
    warm_requests = options.warm_requests
    answer_tokens = options.answer_tokens
    p = _Probe(dep, run_id, "prompt-cache", "prose", 1)
    monitor = LoopMonitor()
    async with make_client(dep, 4) as client:
        doc, _ = await document(client, dep, document_tokens, secrets.token_hex(6))
        other, _ = await document(client, dep, document_tokens, secrets.token_hex(6))
        monitor.start()
        await p.send(
            client,
            _spec("doc-q0", doc + "\nQuestion 0: what is this about?", answer_tokens),
            "cold",
        )
        for k in range(1, warm_requests + 1):
            await p.send(
                client,
                _spec(f"doc-q{k}", doc + f"\nQuestion {k}: name one word.", answer_tokens),
                "warm",
            )
        await p.send(
            client,
            _spec("control-q0", other + "\nQuestion 0: what is this about?", answer_tokens),
            "control",
        )
        await monitor.stop()
    return p.finish(monitor)


PROBES: dict[str, Any] = {
    "prefill-interference": prefill_interference,
    "prompt-cache": prompt_cache,
}


async def _synchronized(
    dep: Deployment,
    run_id: str,
    probe: str,
    workload: str,
    specs: list[StreamSpec],
    label: str,
    trial: int,
) -> WaveRecord:
    """One synchronized wave of ``specs`` (the sweep's machinery), tagged as a probe."""
    wave = _probe_wave(dep, run_id, probe, workload, len(specs), trial, label)
    async with StreamClients(dep) as clients:
        await run_wave(
            clients, wave=wave, target=wave_target(dep, request_headers(dep)), specs=specs
        )
    for r, s in zip(wave.requests, specs, strict=True):
        r.role = s.prompt_id.split("-")[0]  # the workload of each stream
    return wave


async def output_length(
    dep: Deployment, run_id: str, options: OutputLengthOptions
) -> list[WaveRecord]:
    """The same concurrency at several output lengths (the study: GLM, 8 streams, 400 → 1000
    tokens, 19.8 → 17.3 tok/s). One warm-up wave first, never counted."""
    concurrency = options.concurrency
    lengths = options.lengths
    workload = options.workload
    trials = options.trials
    waves = []
    for trial in range(0, trials + 1):
        for length in lengths:
            if trial == 0 and length != lengths[0]:
                continue
            specs = build_streams(
                workload, concurrency, f"{run_id[-6:]}-ol{length}-t{trial}", max_tokens=length
            )
            waves.append(
                await _synchronized(
                    dep, run_id, "output-length", workload, specs, f"L{length:05d}", trial
                )
            )
    return waves


async def mixed(dep: Deployment, run_id: str, options: MixedOptions) -> list[WaveRecord]:
    """Code and prose streams in one synchronized wave: a mixed load, to set beside the sum
    of the alternative workloads' capacities (which the study says is not a mixed result)."""
    concurrency = options.concurrency
    code_share = options.code_share
    trials = options.trials
    max_tokens = options.max_tokens
    n_code = max(1, min(concurrency - 1, round(concurrency * code_share)))
    waves = []
    for trial in range(0, trials + 1):
        tag = f"{run_id[-6:]}-mx-t{trial}"
        specs = build_streams("code", n_code, tag, max_tokens=max_tokens) + build_streams(
            "prose", concurrency - n_code, tag, max_tokens=max_tokens
        )
        waves.append(await _synchronized(dep, run_id, "mixed", "mixed", specs, "mix", trial))
    return waves


PROBES["output-length"] = output_length
PROBES["mixed"] = mixed


# The gap-attribution probe's variants, in the order each trial runs them: the two workloads
# as the sweep asks for them, then one factor of their difference changed at a time. The
# variant is the wave's label (its wave_id), which int_gap_attribution_trials reads.
GAP_VARIANTS: tuple[tuple[str, str, str, str], ...] = (
    # (variant, prompts of, temperature of, lengths of)
    ("code", "code", "code", "code"),
    ("prose", "prose", "prose", "prose"),
    ("code@prose-temperature", "code", "prose", "code"),
    ("code@prose-length", "code", "code", "prose"),
    ("prose@code-temperature", "prose", "code", "prose"),
)


def gap_variant_streams(
    variant: str, concurrency: int, wave_tag: str, max_tokens: int | None = None
) -> list[StreamSpec]:
    """One variant's streams: ``variant``'s prompts with the temperature and the per-stream
    lengths of the workloads it names. ``max_tokens`` is code's length in a shortened probe:
    every stream is scaled by ``max_tokens / 1000`` so the workloads keep their length ratio
    (a flat cap would make both lengths equal and hide the length factor)."""
    by_name = {v[0]: v[1:] for v in GAP_VARIANTS}
    prompts_of, temperature_of, lengths_of = by_name[variant]
    scale = 1.0 if max_tokens is None else max_tokens / CODE_TOKENS
    return [
        replace(
            s,
            temperature=temperature(temperature_of),
            max_tokens=max(2, round(scale * required_length(lengths_of, i))),
        )
        for i, s in enumerate(build_streams(prompts_of, concurrency, wave_tag))
    ]


async def gap_attribution(
    dep: Deployment, run_id: str, options: GapAttributionOptions
) -> list[WaveRecord]:
    """Code, prose and three one-factor variants, each a synchronized wave at the same
    concurrency per trial, interleaved so a drift in the server over the probe falls on every
    variant alike. One warm-up wave first (code), never counted."""
    concurrency = options.concurrency
    waves = []
    for trial in range(0, options.trials + 1):
        for k, (variant, prompts_of, _, _) in enumerate(GAP_VARIANTS):
            if trial == 0 and variant != "code":
                continue
            # the tag is part of the prompt: a variant's name in it ("prose@code-...") would
            # put code's words into a prose prompt
            tag = f"{run_id[-6:]}-ga{k}-t{trial}"
            specs = gap_variant_streams(variant, concurrency, tag, options.max_tokens)
            waves.append(
                await _synchronized(
                    dep, run_id, "gap-attribution", prompts_of, specs, variant, trial
                )
            )
    return waves


PROBES["gap-attribution"] = gap_attribution


# What a ladder's top rung leaves free of the context: the answer, the chat template and the
# question (a few dozen tokens), and the document's sizing tolerance (``document`` stops
# within 1 % of its target, either side), so the top rung fits a server that counts exactly.
LADDER_TEMPLATE_TOKENS = 64
LADDER_SIZING_SHARE = 0.02
# with no context known the ladder climbs until refused, but never past this many tokens
LADDER_UNBOUNDED_TOP = 1 << 17
# where the served context comes from, best first: a slot's context is what one prompt may
# fill (llama-server's n_ctx_train is the model's training context, not the server's)
CONTEXT_SOURCES = ("llama-props", "vllm-models")


async def served_context(dep: Deployment) -> tuple[int | None, str]:
    """The context one prompt may fill and who said so: the deployment's declared
    ``facts.context_tokens``, else the server's (discovery's checked figures), else none."""
    if dep.facts.context_tokens is not None:
        return dep.facts.context_tokens, "declared"
    rows = await discover_facts(dep)
    for source in CONTEXT_SOURCES:
        for row in rows:
            if row.fact == "context_tokens" and row.source == source and row.value is not None:
                return int(row.value), source
    return None, "none"


def ladder_rungs(options: ContextLadderOptions, context_tokens: int | None) -> list[int]:
    """Each rung's target prompt tokens: ``start_tokens`` then steps, ending at the context
    less room for the answer (or, with no context known, at ``LADDER_UNBOUNDED_TOP``)."""
    if context_tokens is None:
        top = LADDER_UNBOUNDED_TOP
    else:
        # a server's claim is checked only against the facts' bound (16M): no ladder builds
        # documents past MAX_TOKENS
        context_tokens = min(context_tokens, MAX_TOKENS)
        room = options.answer_tokens + LADDER_TEMPLATE_TOKENS
        top = context_tokens - room - int(context_tokens * LADDER_SIZING_SHARE)
    rungs: list[int] = []
    size = options.start_tokens
    while size < top:
        rungs.append(size)
        if options.step_tokens is not None:
            size += options.step_tokens
        else:
            size = max(size + 1, int(size * options.step_factor))
    if top >= 16 and (not rungs or rungs[-1] < top):
        rungs.append(top)
    # a context too small for any prompt and its answer: one rung still, for the server to
    # refuse (or not), so the summary says what happened instead of showing nothing
    return rungs or [options.start_tokens]


def ladder_label(context_tokens: int | None, source: str) -> str:
    """The wave's label, which is how dbt learns the context the ladder climbed to and its
    source (``int_ladder_requests`` parses it): ``ctx0008192-llama-props``, ``ctx-none``."""
    return "ctx-none" if context_tokens is None else f"ctx{context_tokens:07d}-{source}"


async def context_ladder(dep: Deployment, run_id: str, options: ContextLadderOptions) -> WaveRecord:
    """One cold and one warm prompt per rung, from ``start_tokens`` up to the context, while
    background streams decode. Roles ``ladder_cold``, ``ladder_warm``, ``background``; prompt
    ids ``ladder-L004096-cold`` carry the rung's target for dbt.

    The ladder ends at the first rung whose cold prompt does not stream (a refusal as too
    long is the context limit showing); nothing is retried. Background streams are short
    requests restarted as they finish until the last rung is done, so they decode through
    every prefill whatever the ladder's length, and the probe outlasts it by one of them."""
    context_tokens: int | None
    if options.context_tokens is not None:
        context_tokens, source = options.context_tokens, "declared"
    else:
        context_tokens, source = await served_context(dep)
    n_background = options.background_streams
    p = _Probe(dep, run_id, "context-ladder", "prose", n_background)
    p.wave.wave_id = (
        f"{run_id}/{dep.name}/context-ladder/{ladder_label(context_tokens, source)}"
        f"/c{n_background:04d}/t1"
    )
    monitor = LoopMonitor()
    ladder_done = asyncio.Event()
    specs = build_streams(
        "prose", n_background, f"{run_id[-6:]}-cl", max_tokens=options.background_tokens
    )

    async def background(client: httpx.AsyncClient, slot: int) -> None:
        k = 0
        while not ladder_done.is_set():
            spec = replace(specs[slot], prompt_id=f"background-{slot}-{k}")
            rec = await p.send(client, spec, "background")
            k += 1
            if rec.status is not Status.OK:
                return  # a failing server is not hammered: this stream ends here

    async with make_client(dep, n_background + 4) as client:
        monitor.start()
        streams = [asyncio.create_task(background(client, i)) for i in range(n_background)]
        try:
            await _until_decoding(p.wave, streams, n_background, dep.timeouts.total_s)
            for target in ladder_rungs(options, context_tokens):
                doc, _ = await document(client, dep, target, secrets.token_hex(6))
                rung = f"ladder-L{target:06d}"
                cold = await p.send(
                    client,
                    _spec(
                        f"{rung}-cold",
                        doc + "\nQuestion 0: what is this about?",
                        options.answer_tokens,
                    ),
                    "ladder_cold",
                )
                if cold.status is not Status.OK:
                    break
                await p.send(
                    client,
                    _spec(
                        f"{rung}-warm",
                        doc + "\nQuestion 1: name one word in it.",
                        options.answer_tokens,
                    ),
                    "ladder_warm",
                )
        finally:
            ladder_done.set()
            await asyncio.gather(*streams)
            await monitor.stop()
    return p.finish(monitor)


PROBES["context-ladder"] = context_ladder
