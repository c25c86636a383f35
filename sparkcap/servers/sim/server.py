"""The simulator's OpenAI-compatible HTTP face (ASGI, served by uvicorn on loopback).

Chunks are shaped like vLLM's: a role-only first chunk, content deltas, a finish chunk, a
usage-only chunk with empty ``choices`` when ``include_usage`` is asked, then ``[DONE]``.
Several deployments share one server, chosen by the request's ``model``. ``GET /sim/log``
returns the server's own timing of every stream, which benchmarks compare with what the
client measured.

Each deployment's ``metric_style`` chooses whose ``/metrics`` names it is shown under (the
simulator's own, or one of five real engines' sets, only those names) and which facts its
``/v1/models`` entry carries; a llama-server-style deployment also answers ``GET /props``, a
vLLM-style one ``GET /version``. A page with several styles shows each deployment's samples in
its own style, so the diagnosis's name map is tested against every engine at once; every page
has the process's ``process_start_time_seconds``, so a restarted server is seen as one.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import math
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from sparkcap.errors import ManagedProcessError
from sparkcap.servers.processes import ManagedProcess
from sparkcap.servers.sim.engine import (
    Engine,
    Histogram,
    MetricStyle,
    SimProfile,
    SimRequest,
    count_prompt_tokens,
    model_weight_bytes,
)
from sparkcap.settings import get_settings


class _Cut(Exception):
    """Raised inside a response body to drop the connection mid-stream."""


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": status}}
    return JSONResponse(body, status_code=status, headers=headers)


MetricKind = Literal["counter", "gauge", "histogram"]
MetricValue = Callable[[Engine], float | Histogram]
# Per engine style, the families its real server exposes (the diagnosis's evidence), in its own
# names: (name, kind, help, value). Counters are named with ``_total``, as their pages show.
# Each family is on that engine's recorded page with the same type (tests/data/metrics_pages);
# what the real engine lacks (llama-server's KV-cache gauge at the pinned build, TGI's KV-cache
# gauge and preemptions) the style lacks too.
ENGINE_METRICS: dict[MetricStyle, tuple[tuple[str, MetricKind, str, MetricValue], ...]] = {
    "vllm": (
        ("vllm:num_requests_running", "gauge", "requests in a batch", Engine.n_admitted),
        ("vllm:num_requests_waiting", "gauge", "requests queued", lambda e: len(e.waiting)),
        ("vllm:kv_cache_usage_perc", "gauge", "KV cache usage, 1 = full", Engine.kv_usage),
        ("vllm:num_preemptions_total", "counter", "preemptions", lambda e: e.preemptions_total),
        ("vllm:prompt_tokens_total", "counter", "prefill tokens", lambda e: e.prompt_tokens_total),
        (
            "vllm:generation_tokens_total",
            "counter",
            "generation tokens",
            lambda e: e.generated_tokens_total,
        ),
        (
            "vllm:spec_decode_num_draft_tokens_total",
            "counter",
            "draft tokens",
            lambda e: e.drafted_total,
        ),
        (
            "vllm:spec_decode_num_accepted_tokens_total",
            "counter",
            "accepted draft tokens",
            lambda e: e.accepted_total,
        ),
        (
            "vllm:request_queue_time_seconds",
            "histogram",
            "time requests spent waiting",
            lambda e: e.queue_time_s,
        ),
    ),
    "sglang": (
        ("sglang:num_running_reqs", "gauge", "running requests", Engine.n_admitted),
        ("sglang:num_queue_reqs", "gauge", "queued requests", lambda e: len(e.waiting)),
        ("sglang:token_usage", "gauge", "KV token usage, 1 = full", Engine.kv_usage),
        (
            "sglang:prompt_tokens_total",
            "counter",
            "prefill tokens",
            lambda e: e.prompt_tokens_total,
        ),
        (
            "sglang:generation_tokens_total",
            "counter",
            "generation tokens",
            lambda e: e.generated_tokens_total,
        ),
        (
            "sglang:spec_accept_length",
            "gauge",
            "mean tokens per decode step per stream, recently",
            Engine.spec_accept_length,
        ),
        (
            "sglang:num_retracted_requests_total",
            "counter",
            "requests retracted (preempted) to free KV cache",
            lambda e: e.preemptions_total,
        ),
        (
            "sglang:queue_time_seconds",
            "histogram",
            "Histogram of queueing time in seconds.",
            lambda e: e.queue_time_s,
        ),
    ),
    "llamacpp": (
        ("llamacpp:requests_processing", "gauge", "requests processing", Engine.n_admitted),
        ("llamacpp:requests_deferred", "gauge", "requests deferred", lambda e: len(e.waiting)),
        (
            "llamacpp:prompt_tokens_total",
            "counter",
            "prompt tokens processed",
            lambda e: e.prompt_tokens_total,
        ),
        (
            "llamacpp:tokens_predicted_total",
            "counter",
            "generation tokens",
            lambda e: e.generated_tokens_total,
        ),
        (
            "llamacpp:n_decode_total",
            "counter",
            "llama_decode() calls",
            lambda e: e.iterations_total,
        ),
        (
            "llamacpp:spec_decode_num_draft_tokens_total",
            "counter",
            "Speculative: Total draft tokens generated",
            lambda e: e.drafted_total,
        ),
        (
            "llamacpp:spec_decode_num_accepted_tokens_total",
            "counter",
            "Speculative: Total draft tokens accepted by the target model",
            lambda e: e.accepted_total,
        ),
    ),
    "tgi": (
        ("tgi_batch_current_size", "gauge", "current batch size", Engine.n_admitted),
        ("tgi_queue_size", "gauge", "current queue size", lambda e: len(e.waiting)),
        (
            "tgi_request_generated_tokens",
            "histogram",
            "generated tokens per request",
            lambda e: e.request_generation_tokens,
        ),
        (
            "tgi_request_input_length",
            "histogram",
            "input tokens per request",
            lambda e: e.request_prompt_tokens,
        ),
        (
            "tgi_request_queue_duration",
            "histogram",
            "request queue duration, seconds",
            lambda e: e.queue_time_s,
        ),
    ),
    "trtllm": (
        (
            "trtllm_request_success_total",
            "counter",
            "requests finished",
            lambda e: e.finished_total,
        ),
        (
            "trtllm_request_queue_time_seconds",
            "histogram",
            "time requests spent waiting",
            lambda e: e.queue_time_s,
        ),
        (
            "trtllm_time_to_first_token_seconds",
            "histogram",
            "time to first token",
            lambda e: e.ttft_s,
        ),
    ),
}
# llama-server and TGI serve one model and label nothing; the others say whose sample it is
UNLABELLED_STYLES: frozenset[MetricStyle] = frozenset({"llamacpp", "tgi"})


def _label_value(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    body = ",".join(f'{k}="{_label_value(v)}"' for k, v in pairs)
    return f"{{{body}}}" if body else ""


def _number(v: float) -> str:
    if math.isinf(v):
        return "+Inf"
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def _family_lines(
    name: str,
    kind: MetricKind,
    help_text: str,
    value: MetricValue,
    engines: list[tuple[str | None, Engine]],
) -> list[str]:
    """One family in the text format: HELP, TYPE, then each engine's samples (labelled with
    its model unless ``None``)."""
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    for model_name, eng in engines:
        base = [] if model_name is None else [("model_name", model_name)]
        v = value(eng)
        if isinstance(v, Histogram):
            for bound, n in v.cumulative():
                lines.append(f"{name}_bucket{_labels([('le', _number(bound)), *base])} {n}")
            lines.append(f"{name}_sum{_labels(base)} {_number(v.sum)}")
            lines.append(f"{name}_count{_labels(base)} {v.count}")
        else:
            lines.append(f"{name}{_labels(base)} {_number(v)}")
    return lines


def _sim_lines(engines: dict[str, Engine]) -> list[str]:
    """The simulator's own page, as it always was, then the KV gauge and preemption counter."""
    lines: list[str] = []
    for name, help_text, attr in (
        ("sim:requests_total", "requests received", "requests_total"),
        ("sim:rejected_total", "requests rejected", "rejected_total"),
        ("sim:generation_tokens_total", "tokens generated", "generated_tokens_total"),
        ("sim:prompt_tokens_total", "prompt tokens received", "prompt_tokens_total"),
        ("sim:spec_decode_num_draft_tokens_total", "draft tokens", "drafted_total"),
        ("sim:spec_decode_num_accepted_tokens_total", "accepted drafts", "accepted_total"),
        ("sim:iterations_total", "engine iterations", "iterations_total"),
    ):
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} counter")
        for model_name, eng in engines.items():
            lines.append(f'{name}{{model_name="{model_name}"}} {getattr(eng, attr)}')
    for name, attr in (
        ("sim:num_requests_running", "running"),
        ("sim:num_requests_waiting", "waiting"),
    ):
        lines.append(f"# TYPE {name} gauge")
        for model_name, eng in engines.items():
            lines.append(f'{name}{{model_name="{model_name}"}} {len(getattr(eng, attr))}')
    labelled: list[tuple[str | None, Engine]] = list(engines.items())
    lines += _family_lines(
        "sim:kv_cache_usage_perc", "gauge", "KV cache usage, 1 = full", Engine.kv_usage, labelled
    )
    lines += _family_lines(
        "sim:num_preemptions_total",
        "counter",
        "preemptions",
        lambda e: e.preemptions_total,
        labelled,
    )
    return lines


def metrics_text(engines: dict[str, Engine], started_at_s: float | None = None) -> str:
    """The /metrics page: each style's families over the deployments of that style. An
    unlabelled style hosting more than one deployment labels them after all, so that the page
    never repeats a sample. Every page ends with the standard ``process_start_time_seconds``
    (``started_at_s``, seconds since the epoch): a restarted server's is a later one."""
    lines: list[str] = []
    by_style: dict[MetricStyle, dict[str, Engine]] = {}
    for model_name, eng in engines.items():
        by_style.setdefault(eng.p.metric_style, {})[model_name] = eng
    for style, group in by_style.items():
        if style == "sim":
            lines += _sim_lines(group)
            continue
        unlabelled = style in UNLABELLED_STYLES and len(group) == 1
        members: list[tuple[str | None, Engine]] = [
            (None if unlabelled else m, e) for m, e in group.items()
        ]
        for name, kind, help_text, value in ENGINE_METRICS[style]:
            lines += _family_lines(name, kind, help_text, value, members)
    if started_at_s is not None:
        lines += [
            "# HELP process_start_time_seconds Start time of the process since unix epoch in "
            "seconds.",
            "# TYPE process_start_time_seconds gauge",
            f"process_start_time_seconds {started_at_s!r}",
        ]
    return "\n".join(lines) + "\n"


def dcgm_text(engines: dict[str, Engine]) -> str:
    """A DCGM exporter's page: each deployment one GPU (``gpu`` label in order), drawing
    idle_power_w plus power_per_stream_w per admitted request, and the energy counter (mJ,
    an integer as DCGM's is) that integrates the draw: the known answer an energy test
    compares with what sparkcap's marts computed."""
    power = [
        "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).",
        "# TYPE DCGM_FI_DEV_POWER_USAGE gauge",
    ]
    energy = [
        "# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).",
        "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter",
    ]
    for gpu, (model_name, eng) in enumerate(engines.items()):
        labels = _labels(
            [
                ("gpu", str(gpu)),
                ("UUID", f"GPU-sim-{gpu}"),
                ("modelName", "sim"),
                ("model", model_name),
            ]
        )
        joules = eng.meter_energy()
        power.append(f"DCGM_FI_DEV_POWER_USAGE{labels} {_number(eng.power_w())}")
        energy.append(f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{labels} {int(joules * 1000)}")
    return "\n".join(power + energy) + "\n"


def model_entry(profile: SimProfile) -> dict[str, Any]:
    """A /v1/models entry with the facts its engine's server gives: vLLM the context length,
    llama-server the GGUF's metadata (``size`` and ``n_params`` only when declared)."""
    entry: dict[str, Any] = {
        "id": profile.model,
        "object": "model",
        "owned_by": profile.metric_style,
    }
    if profile.metric_style == "vllm":
        entry["max_model_len"] = profile.n_ctx
    elif profile.metric_style == "llamacpp":
        meta: dict[str, Any] = {"n_ctx_train": profile.n_ctx, "n_embd": profile.n_embd}
        size = model_weight_bytes(profile)
        if size is not None:
            meta["size"] = int(size)
        if profile.n_params is not None:
            meta["n_params"] = profile.n_params
        entry["meta"] = meta
    return entry


def build_info(engine_version: str) -> str:
    """llama-server's ``build_info``, ``b<build number>-<commit>``: a version of that shape as
    it is, any other as build 0 and a commit derived from it (another version, another
    commit)."""
    if re.fullmatch(r"b[0-9]+-[0-9a-f]{7,40}", engine_version):
        return engine_version
    return f"b0-{hashlib.sha1(engine_version.encode()).hexdigest()[:7]}"


def props(profile: SimProfile) -> dict[str, Any]:
    """llama-server's ``GET /props``: the server's context, slots, model file and build."""
    return {
        "default_generation_settings": {"n_ctx": profile.n_ctx},
        "total_slots": profile.max_slots,
        "model_path": f"{profile.model}.gguf",
        "build_info": build_info(profile.engine_version),
    }


def context_refusal(n_prompt_tokens: int, n_ctx: int) -> JSONResponse:
    """llama-server's answer to a prompt that does not fit a slot's context (it refuses one
    of ``n_ctx`` tokens or more, leaving no room for a token of answer): HTTP 400 before any
    stream starts, never a truncation, so a context ladder sees the limit as a refusal."""
    message = (
        f"request ({n_prompt_tokens} tokens) exceeds the available context size "
        f"({n_ctx} tokens), try increasing it"
    )
    body = {
        "error": {
            "code": 400,
            "message": message,
            "type": "exceed_context_size_error",
            "n_prompt_tokens": n_prompt_tokens,
            "n_ctx": n_ctx,
        }
    }
    return JSONResponse(body, status_code=400)


def prompt_text(messages: list[Any]) -> str:
    """What the engine prefills for a chat: one string, so its token count (and the prefill
    time) is what a benchmark replaying the model (``Engine.schedule``) must give it too."""
    return "".join(
        f"<{m.get('role', '')}>{m.get('content', '')}" for m in messages if isinstance(m, dict)
    )


def create_app(
    profiles: Iterable[SimProfile],
    required_api_key: str | None = None,
    required_headers: Mapping[str, str] | None = None,
) -> Starlette:
    """``required_api_key`` makes the chat route answer 401 without ``Bearer <key>`` (and
    ``required_headers`` without each of those headers and values, as Azure's ``api-key``
    does), so a test can prove a secret really travelled before checking that it was stored
    nowhere."""
    engines: dict[str, Engine] = {p.model: Engine(p) for p in profiles}

    def unauthorized(request: Request) -> bool:
        for name, value in (required_headers or {}).items():
            if not hmac.compare_digest(request.headers.get(name, ""), value):
                return True
        return required_api_key is not None and not hmac.compare_digest(
            request.headers.get("authorization", ""), f"Bearer {required_api_key}"
        )

    async def chat(request: Request) -> Response:
        if unauthorized(request):
            return _error(401, "missing or wrong API key")
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "body must be a JSON object")
        model = body.get("model")
        engine = engines.get(str(model))
        if engine is None:
            return _error(404, f"The model `{model}` does not exist.")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "messages must be a non-empty list")
        prompt = prompt_text(messages)
        n_prompt_tokens = count_prompt_tokens(prompt)
        if n_prompt_tokens >= engine.p.n_ctx:
            return context_refusal(n_prompt_tokens, engine.p.n_ctx)
        try:
            max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 256)
            temperature = float(body.get("temperature", 1.0))
        except (TypeError, ValueError):
            return _error(400, "max_tokens and temperature must be numbers")
        if max_tokens < 1:
            return _error(400, "max_tokens must be at least 1")
        opts = body.get("stream_options") or {}
        include_usage = bool(opts.get("include_usage"))
        continuous = bool(opts.get("continuous_usage_stats"))
        ordinal = engine.next_ordinal()
        fault = engine.fault_for(ordinal)
        if fault is not None and fault.reject_status is not None:
            engine.rejected_total += 1
            return _error(
                fault.reject_status,
                "server is overloaded",
                headers={"Retry-After": str(fault.retry_after_s)},
            )
        rid = request.headers.get("x-request-id") or f"sim-{uuid.uuid4().hex[:12]}"
        req = SimRequest(
            request_id=rid,
            prompt_text=prompt,
            max_tokens=max_tokens,
            temperature=temperature,
            min_tokens=int(body.get("min_tokens") or 0),
            ignore_eos=bool(body.get("ignore_eos")),
            ordinal=ordinal,
            fault=fault,
        )
        omit_usage = fault is not None and fault.omit_usage
        trickle = fault.trickle_interval_s if fault is not None else None
        # vLLM's and SGLang's switch for a thinking model's chat template
        kwargs = body.get("chat_template_kwargs")
        thinking_off = isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False
        reasoning_n = 0 if thinking_off else engine.p.reasoning_tokens
        if not body.get("stream"):
            return await _complete(engine, req, model=str(model), include_usage=not omit_usage)
        engine.submit(req)
        return StreamingResponse(
            _stream(
                engine,
                req,
                model=str(model),
                include_usage=include_usage and not omit_usage,
                continuous=continuous and not omit_usage,
                trickle_s=trickle,
                reasoning_n=reasoning_n,
            ),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Request-Id": rid},
        )

    async def tokenize(request: Request) -> Response:
        """llama.cpp's shape: ``{"content": text}`` → ``{"tokens": [...]}``."""
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "body is not JSON")
        text = body.get("content") if isinstance(body, dict) else None
        if not isinstance(text, str):
            return _error(400, "content must be a string")
        return JSONResponse({"tokens": list(range(count_prompt_tokens(text)))})

    async def models(request: Request) -> Response:
        if unauthorized(request):
            return _error(401, "missing or wrong API key")
        return JSONResponse(
            {"object": "list", "data": [model_entry(e.p) for e in engines.values()]}
        )

    async def server_props(request: Request) -> Response:
        """Only a llama-server-style deployment answers (``?model=`` chooses among several;
        else the first), as only llama-server has the route."""
        if unauthorized(request):
            return _error(401, "missing or wrong API key")
        llama = {m: e for m, e in engines.items() if e.p.metric_style == "llamacpp"}
        wanted = request.query_params.get("model")
        eng = llama.get(wanted) if wanted is not None else next(iter(llama.values()), None)
        if eng is None:
            return _error(404, "no llama-server-style model serves /props")
        return JSONResponse(props(eng.p))

    async def version(request: Request) -> Response:
        """vLLM's ``GET /version``: one process, one version (the first vLLM-style one's)."""
        if unauthorized(request):
            return _error(401, "missing or wrong API key")
        vllm = [e for e in engines.values() if e.p.metric_style == "vllm"]
        if not vllm:
            return _error(404, "no vLLM-style model serves /version")
        return JSONResponse({"version": vllm[0].p.engine_version})

    async def reset_prefix_cache(request: Request) -> Response:
        """vLLM's ``POST /reset_prefix_cache``: every deployment that serves it forgets its
        prefix cache (as the profile says it does: ``cache_reset``)."""
        if unauthorized(request):
            return _error(401, "missing or wrong API key")
        serving = [e for e in engines.values() if e.p.cache_reset != "absent"]
        if not serving:
            return _error(404, "Not Found")
        for e in serving:
            if e.p.cache_reset == "works":
                e.cache.clear()
        return JSONResponse({})

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics(request: Request) -> Response:
        if unauthorized(request):  # behind the same gateway as the API, as often in practice
            return _error(401, "missing or wrong API key")
        return PlainTextResponse(metrics_text(engines, app.state.started_at_s))

    async def dcgm_metrics(_: Request) -> Response:
        return PlainTextResponse(dcgm_text(engines))

    async def sim_log(request: Request) -> Response:
        out = []
        for eng in engines.values():
            for e in eng.log.values():
                out.append(
                    {
                        "request_id": e.request_id,
                        "model": e.model,
                        "prompt_tokens": e.prompt_tokens,
                        "cached_tokens": e.cached_tokens,
                        "completion_tokens": e.completion_tokens,
                        "first_token_ns": e.first_token_ns,
                        "last_token_ns": e.last_token_ns,
                        "n_chunks": e.n_chunks,
                        "finish_reason": e.finish_reason,
                        "decode_tok_s": e.decode_tok_s,
                    }
                )
        if request.query_params.get("clear"):
            for eng in engines.values():
                eng.log.clear()
        return JSONResponse(out)

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models),
            Route("/props", server_props),
            Route("/version", version),
            Route("/tokenize", tokenize, methods=["POST"]),
            Route("/reset_prefix_cache", reset_prefix_cache, methods=["POST"]),
            Route("/health", health),
            Route("/metrics", metrics),
            Route("/dcgm/metrics", dcgm_metrics),
            Route("/sim/log", sim_log),
        ]
    )
    app.state.engines = engines
    app.state.started_at_s = time.time()  # SimServer.start sets it again: a restart is later
    return app


def _chunk(
    rid: str, model: str, created: int, delta: dict[str, Any], finish: str | None
) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{rid}",
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def _usage(req: SimRequest, completion: int, reasoning_n: int = 0) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": req.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": req.prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": req.cached_tokens},
    }
    if reasoning_n:  # OpenAI's shape: the reasoning share of completion_tokens
        usage["completion_tokens_details"] = {"reasoning_tokens": min(completion, reasoning_n)}
    return usage


async def _stream(
    engine: Engine,
    req: SimRequest,
    *,
    model: str,
    include_usage: bool,
    continuous: bool,
    trickle_s: float | None,
    reasoning_n: int = 0,
) -> AsyncIterator[bytes]:
    created = int(time.time())
    rid = req.request_id
    entry = engine.log[rid]
    completion = 0
    try:
        role = _chunk(rid, model, created, {"role": "assistant", "content": ""}, None)
        if continuous:
            role["usage"] = _usage(req, 0)
        yield _sse(role)
        if trickle_s is not None:
            engine.cancel(req)
            while True:  # one token per interval, forever: only a client deadline ends it
                await asyncio.sleep(trickle_s)
                completion += 1
                yield _sse(_chunk(rid, model, created, {"content": "x "}, None))
        while True:
            em = await req.out.get()
            if em.kind == "tokens":
                # a thinking model's first reasoning_n tokens are its reasoning (a chunk that
                # begins inside them is reasoning whole)
                field = engine.p.reasoning_field if completion < reasoning_n else "content"
                completion += em.n_tokens
                ch = _chunk(rid, model, created, {field: em.text}, None)
                if continuous:
                    ch["usage"] = _usage(req, completion, reasoning_n)
                data = _sse(ch)
                now = time.perf_counter_ns()
                if entry.first_token_ns is None:
                    entry.first_token_ns = now
                entry.last_token_ns = now
                entry.completion_tokens = completion
                entry.n_chunks += 1
                yield data
            elif em.kind == "finish":
                entry.finish_reason = em.finish_reason
                fin = _chunk(rid, model, created, {}, em.finish_reason)
                if continuous:
                    fin["usage"] = _usage(req, completion, reasoning_n)
                yield _sse(fin)
                if include_usage:
                    use = {**_chunk(rid, model, created, {}, None), "choices": []}
                    use["usage"] = _usage(req, completion, reasoning_n)
                    yield _sse(use)
                yield b"data: [DONE]\n\n"
                return
            elif em.kind == "cut":
                raise _Cut(f"simulated connection cut after {completion} tokens")
            elif em.kind == "end_no_done":
                return
            elif em.kind == "error":
                err = {
                    "error": {
                        "message": "simulated engine failure",
                        "type": "server_error",
                        "code": 500,
                    }
                }
                yield _sse(err)
                return
            elif em.kind == "stall":
                await asyncio.sleep(3600)
                return
    finally:
        engine.cancel(req)


async def _complete(
    engine: Engine, req: SimRequest, *, model: str, include_usage: bool
) -> Response:
    engine.submit(req)
    text: list[str] = []
    completion = 0
    finish = None
    try:
        while True:
            em = await req.out.get()
            if em.kind == "tokens":
                text.append(em.text)
                completion += em.n_tokens
            elif em.kind == "finish":
                finish = em.finish_reason
                break
            else:
                return _error(500, "simulated engine failure")
    finally:
        engine.cancel(req)
    body: dict[str, Any] = {
        "id": f"chatcmpl-{req.request_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(text)},
                "finish_reason": finish,
            }
        ],
    }
    if include_usage:
        body["usage"] = _usage(req, completion)
    return JSONResponse(body)


class SimServer:
    """The simulator on 127.0.0.1, in a background thread with its own event loop."""

    def __init__(
        self,
        profiles: Iterable[SimProfile],
        port: int = 0,
        ssl_certfile: Path | None = None,
        ssl_keyfile: Path | None = None,
        required_api_key: str | None = None,
        required_headers: Mapping[str, str] | None = None,
    ) -> None:
        self.app = create_app(profiles, required_api_key, required_headers)
        self.scheme = "https" if ssl_certfile else "http"
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self.port: int = self._sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            # never dictConfig the process's logging: that closed and flushed the handlers
            # of whatever hosts the simulator, and a Prefect API log handler's flush beside a
            # concurrency-slot thread deadlocked (the overlap test hung 48 min under a burner)
            log_config=None,
            log_level="critical",
            lifespan="off",
            access_log=False,
            timeout_keep_alive=120,
            ssl_certfile=str(ssl_certfile) if ssl_certfile else None,
            ssl_keyfile=str(ssl_keyfile) if ssl_keyfile else None,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def endpoint(self) -> str:
        return f"{self.base_url}/v1"

    def start(self, timeout_s: float = 10.0) -> SimServer:
        self.app.state.started_at_s = time.time()
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("simulator did not start")
            time.sleep(0.01)
        return self

    def serve_forever(self) -> None:
        self._server.run(sockets=[self._sock])

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._sock.close()

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class SimProcess:
    """The twin fleet in a child process (``python -m sparkcap.servers.sim``), on a free port."""

    def __init__(self, overrides: dict[str, Any] | None = None) -> None:
        self.overrides = overrides or {}
        self.proc: Any = None
        self.managed: ManagedProcess | None = None
        self.log_path: Path | None = None
        self.endpoint = ""
        self.base_url = ""

    def start(self, timeout_s: float = 30.0) -> SimProcess:
        """Start the child with its output in a log file (a full pipe would block it)."""
        import sys
        import tempfile

        logs = get_settings().work_dir / "logs"
        ready = Path(tempfile.mkdtemp(prefix="sparkcap-sim-")) / "ready.json"
        self.managed = ManagedProcess.spawn(
            "simulator process",
            [
                sys.executable,
                "-m",
                "sparkcap.servers.sim",
                "0",
                json.dumps(self.overrides),
                str(ready),
            ],
            logs / f"sim-{os.getpid()}-{time.time_ns()}.log",
        )
        self.proc, self.log_path = self.managed.process, self.managed.log_path
        started = time.monotonic()
        try:
            self.managed.wait_until(ready.exists, timeout_s, poll_s=0.02)
            info = json.loads(ready.read_text(encoding="utf-8"))
            ready.unlink()
            ready.parent.rmdir()
            self.endpoint = info["endpoint"]
            self.base_url = self.endpoint.removesuffix("/v1")
            left = max(1.0, timeout_s - (time.monotonic() - started))
            self.managed.wait_healthy(self.base_url + "/health", left)
        except ManagedProcessError as exc:
            self.stop()
            raise RuntimeError(f"simulator did not start: {exc}") from None
        return self

    def stop(self) -> None:
        if self.managed is not None:
            self.managed.stop()

    def __enter__(self) -> SimProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
