"""The simulator's OpenAI-compatible HTTP routes (an ASGI app, served by ``sim.server``).

Chunks are shaped like vLLM's: a role-only first chunk, content deltas, a finish chunk, a
usage-only chunk with empty ``choices`` when ``include_usage`` is asked, then ``[DONE]``.
Several deployments share one app, chosen by the request's ``model``. ``GET /sim/log``
returns the server's own timing of every stream, which benchmarks compare with what the
client measured.

Each deployment's ``metric_style`` chooses which facts its ``/v1/models`` entry carries (and
whose names its ``/metrics`` samples wear: ``sim.metrics_pages``); a llama-server-style
deployment also answers ``GET /props``, a vLLM-style one ``GET /version``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from sparkcap.servers.sim.engine import Engine, SimRequest
from sparkcap.servers.sim.metrics_pages import dcgm_text, metrics_text
from sparkcap.servers.sim.physics import model_weight_bytes
from sparkcap.servers.sim.profile import SimProfile
from sparkcap.servers.sim.text import count_prompt_tokens


class _Cut(Exception):
    """Raised inside a response body to drop the connection mid-stream."""


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": status}}
    return JSONResponse(body, status_code=status, headers=headers)


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
