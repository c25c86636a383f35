"""Discovery against llama-server and vLLM shaped answers (httpx.MockTransport, no socket):
what each source gives, which hostile values are refused, and that a failure is a row."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkcap.config.deployment import Deployment
from sparkcap.loadgen.discover import (
    DISCOVERY,
    FactRow,
    declared_facts,
    discover_facts,
)
from tests.unit.loadgen.test_gguf import gguf_bytes

pytestmark = pytest.mark.unit

Handler = Callable[[httpx.Request], httpx.Response]

LLAMA_MODELS = {
    "object": "list",
    "data": [
        {
            "id": "gemma",
            "object": "model",
            "owned_by": "llamacpp",
            "meta": {"n_vocab": 262144, "n_ctx_train": 32768, "size": 253089792},
        }
    ],
}
LLAMA_PROPS = {"default_generation_settings": {"n_ctx": 4096, "temperature": 0.8}, "total_slots": 4}
VLLM_MODELS = {"data": [{"id": "gemma", "owned_by": "vllm", "max_model_len": 8192}]}


def respond(status: int, body: bytes = b"") -> httpx.Response:
    """A response read as a stream (fetch_bounded reads it raw, piece by piece)."""
    return httpx.Response(status, stream=httpx.ByteStream(body))


def pages(models: Any, props: Any = None, status: dict[str, int] | None = None) -> Handler:
    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        code = (status or {}).get(path)
        if code is not None:
            return respond(code)
        body = {"/v1/models": models, "/props": props}.get(path)
        if body is None:
            return respond(404)
        text = body if isinstance(body, str | bytes) else json.dumps(body)
        return respond(200, text.encode() if isinstance(text, str) else text)

    return handle


def discover(handler: Handler, dep: Deployment | None = None, **kw: Any) -> list[FactRow]:
    d = dep or Deployment(name="d", model="gemma", endpoint="http://h:8080/v1")  # type: ignore[arg-type]

    async def go() -> list[FactRow]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await discover_facts(d, client=client, **kw)

    return asyncio.run(go())


def facts(rows: list[FactRow]) -> dict[tuple[str, str], float | str | None]:
    return {
        (r.fact, r.source): r.text_value if r.fact == "engine" else r.value
        for r in rows
        if r.fact != DISCOVERY
    }


def problems(rows: list[FactRow]) -> list[str]:
    return [f"{r.source}: {r.detail}" for r in rows if r.fact == DISCOVERY]


def test_llama_server_pages() -> None:
    rows = discover(pages(LLAMA_MODELS, LLAMA_PROPS))
    assert facts(rows) == {
        ("engine", "models-owned-by"): "llamacpp",
        ("weight_bytes", "llama-models-meta"): 253089792.0,
        ("context_tokens", "llama-models-meta"): 32768.0,
        ("context_tokens", "llama-props"): 4096.0,
        ("server_slots", "llama-props"): 4.0,
    }
    assert problems(rows) == []


def test_vllm_pages_and_a_404_is_not_an_error() -> None:
    rows = discover(pages(VLLM_MODELS))  # no /props: 404
    assert facts(rows) == {
        ("engine", "models-owned-by"): "vllm",
        ("context_tokens", "vllm-models"): 8192.0,
    }
    assert problems(rows) == []


def test_an_unknown_owner_is_ignored() -> None:
    listing = {"data": [{"id": "gemma", "owned_by": "organization-owner"}]}
    assert discover(pages(listing)) == []


@pytest.mark.parametrize(
    ("field", "hostile", "refused"),
    [
        ("total_slots", True, "server_slots True"),
        ("total_slots", 2**70, "server_slots 1180591620717411303424"),
        ("total_slots", 0, "server_slots 0"),
        ("total_slots", 1e400, "server_slots inf"),
        ("n_ctx", -4096, "context_tokens -4096"),
        ("n_ctx", "4096", "context_tokens '4096'"),
        ("n_ctx", 4096.5, "context_tokens 4096.5"),
        ("size", -5, "weight_bytes -5"),
        ("size", 2**70, "weight_bytes 1180591620717411303424"),
        ("size", "NaN", "weight_bytes nan"),
        ("n_ctx_train", None, "context_tokens None"),
    ],
)
def test_hostile_values_are_refused_by_name(field: str, hostile: Any, refused: str) -> None:
    models = json.loads(json.dumps(LLAMA_MODELS))
    props = json.loads(json.dumps(LLAMA_PROPS))
    if field in ("size", "n_ctx_train"):
        models["data"][0]["meta"][field] = hostile
    elif field == "n_ctx":
        props["default_generation_settings"]["n_ctx"] = hostile
    else:
        props[field] = hostile
    text = json.dumps(models).replace('"NaN"', "NaN")
    rows = discover(pages(text, json.dumps(props).replace("1e+400", "1e400")))
    (problem,) = problems(rows)
    assert f"refused {refused}" in problem
    fact = refused.split()[0]
    kept = {k for k in facts(rows) if k[0] == fact}
    assert all(v is not None for v in facts(rows).values())
    # the hostile source's figure is gone; another source's may stay
    assert len(kept) == (1 if fact == "context_tokens" else 0)


def test_failures_are_rows_naming_the_path_never_the_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DISCOVER_TEST_KEY", "sk-very-secret")
    dep = Deployment(
        name="d",
        model="gemma",
        endpoint="http://h:8080/v1?api-version=2024-token-in-query",  # type: ignore[arg-type]
        api_key_env="DISCOVER_TEST_KEY",
    )
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        if request.url.path == "/props":
            return respond(401)
        return respond(200, json.dumps(LLAMA_MODELS).encode())

    rows = discover(handler, dep)
    assert seen == ["Bearer sk-very-secret"] * 2  # the deployment's own key, on both
    assert problems(rows) == ["llama-props: GET /props: HTTP 401"]
    text = repr(rows)
    assert "sk-very-secret" not in text and "token-in-query" not in text


def test_an_endless_or_oversized_body_is_bounded() -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/props":
            await asyncio.sleep(10)
        return respond(200, json.dumps(LLAMA_MODELS).encode())

    rows = discover(slow, timeout_s=0.2)  # type: ignore[arg-type]
    assert problems(rows) == [
        "llama-props: GET /props: no complete answer within 0.2 s from /props"
    ]

    def big(request: httpx.Request) -> httpx.Response:
        return respond(200, b"x" * ((1 << 20) + 1))

    assert problems(discover(big)) == [
        "models-owned-by: GET /v1/models: body larger than 1048576 bytes from /v1/models"
    ]
    assert problems(discover(pages("{not json"))) == [
        "models-owned-by: GET /v1/models: the body is not JSON"
    ]


def test_props_is_asked_only_of_a_llama_server_and_a_given_listing_is_not_fetched() -> None:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return pages(VLLM_MODELS, LLAMA_PROPS)(request)

    assert facts(discover(handler)) == {
        ("engine", "models-owned-by"): "vllm",
        ("context_tokens", "vllm-models"): 8192.0,
    }
    assert asked == ["/v1/models"]  # a vLLM listing: no /props
    asked.clear()
    rows = discover(handler, listing=LLAMA_MODELS)  # the preflight's listing
    assert asked == ["/props"]
    assert facts(rows)[("server_slots", "llama-props")] == 4.0
    asked.clear()
    assert discover(handler, listing=None) == [] and asked == []  # preflight found none


def test_a_missing_secret_is_a_row_not_an_error() -> None:
    dep = Deployment(
        name="d",
        model="gemma",
        endpoint="http://h:8080/v1",  # type: ignore[arg-type]
        header_env={"x-api-key": "DISCOVER_TEST_UNSET"},
    )
    rows = discover(pages(LLAMA_MODELS, LLAMA_PROPS), dep)
    assert facts(rows) == {}
    (problem,) = problems(rows)  # no listing, so no llama-server to ask for /props
    assert problem.startswith("models-owned-by: GET /v1/models not sent: d: header 'x-api-key'")
    assert "DISCOVER_TEST_UNSET" in problem


def moe_gguf(tmp_path: Path, **extra: tuple[int, Any]) -> Path:
    kvs: dict[str, tuple[int, Any]] = {
        "general.architecture": (8, "qwen3moe"),
        "qwen3moe.block_count": (4, 48),
        "qwen3moe.attention.head_count": (4, 32),
        "qwen3moe.attention.head_count_kv": (4, 4),
        "qwen3moe.attention.key_length": (4, 128),
        "qwen3moe.attention.value_length": (4, 128),
        "qwen3moe.expert_count": (4, 128),
        "qwen3moe.expert_used_count": (4, 8),
        "tokenizer.ggml.tokens": (9, (8, ["a", "b"])),
    }
    kvs.update(extra)
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes([(k, code, v) for k, (code, v) in kvs.items()]))
    return path


def gguf_dep(path: Path) -> Deployment:
    return Deployment(
        name="d",
        model="gemma",
        endpoint="http://h:8080/v1",  # type: ignore[arg-type]
        facts={"gguf_path": path},  # type: ignore[arg-type]
    )


def test_a_declared_gguf_gives_kv_bytes_and_experts(tmp_path: Path) -> None:
    rows = discover(pages(LLAMA_MODELS, LLAMA_PROPS), gguf_dep(moe_gguf(tmp_path)))
    got = facts(rows)
    assert got[("kv_bytes_per_token", "gguf")] == 48 * 4 * (128 + 128) * 2
    assert got[("moe_experts", "gguf")] == 128 and got[("moe_experts_per_token", "gguf")] == 8
    # an MoE file's size is not what a step reads: no dense weight_bytes from meta.size
    assert ("weight_bytes", "llama-models-meta") not in got
    (kv,) = [r for r in rows if r.fact == "kv_bytes_per_token"]
    assert kv.detail is not None and "f16 KV cache assumed" in kv.detail


def test_gguf_head_size_from_the_embedding_width(tmp_path: Path) -> None:
    path = tmp_path / "dense.gguf"
    path.write_bytes(
        gguf_bytes(
            [
                ("general.architecture", 8, "llama"),
                ("llama.block_count", 4, 32),
                ("llama.attention.head_count", 4, 32),
                ("llama.attention.head_count_kv", 4, 8),
                ("llama.embedding_length", 4, 4096),
                ("llama.expert_count", 4, 0),  # 0: dense
            ]
        )
    )
    rows = discover(pages(None), gguf_dep(path))
    assert facts(rows) == {("kv_bytes_per_token", "gguf"): 32 * 8 * (2 * 128) * 2}


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"qwen3moe.expert_used_count": (4, 129)}, "more than qwen3moe.expert_count"),
        ({"qwen3moe.expert_count": (10, 2**40)}, "refused moe_experts"),
        ({"qwen3moe.block_count": (7, 1)}, "refused layers True"),
        ({"qwen3moe.attention.key_length": (6, 128.0)}, "refused head_dim 128.0"),
        ({"general.architecture": (4, 3)}, "general.architecture is 3"),
        ({"qwen3moe.attention.head_count_kv": (9, (4, [4, 4]))}, "not 48 per-layer head counts"),
    ],
)
def test_hostile_gguf_values_are_refused(
    tmp_path: Path, extra: dict[str, tuple[int, Any]], needle: str
) -> None:
    rows = discover(pages(None), gguf_dep(moe_gguf(tmp_path, **extra)))
    assert any(needle in p for p in problems(rows)), problems(rows)


def test_a_broken_gguf_is_a_row(tmp_path: Path) -> None:
    path = tmp_path / "cut.gguf"
    path.write_bytes(gguf_bytes([("general.architecture", 8, "llama")])[:30])
    rows = discover(pages(None), gguf_dep(path))
    (problem,) = problems(rows)
    assert problem.startswith("gguf: truncated at byte")


def test_declared_facts_are_rows() -> None:
    dep = Deployment(
        name="d",
        model="m",
        endpoint="http://h:8080/v1",  # type: ignore[arg-type]
        parallel_slots=6,
        facts={  # type: ignore[arg-type]
            "engine": "vllm",
            "memory_bandwidth_gb_s": 273,
            "nodes_per_replica": 2,
            "moe": {
                "experts": 64,
                "experts_per_token": 4,
                "expert_bytes": 1e8,
                "shared_bytes": 2e9,
            },
            "layers": 10,
            "kv_heads": 2,
            "head_dim": 64,
            "context_tokens": 8192,
        },
    )
    got = {r.fact: r.text_value or r.value for r in declared_facts(dep)}
    assert got == {
        "engine": "vllm",
        "memory_bandwidth_gb_s": 273.0,
        "nodes_per_replica": 2.0,
        "context_tokens": 8192.0,
        "server_slots": 6.0,
        "moe_experts": 64.0,
        "moe_experts_per_token": 4.0,
        "moe_expert_bytes": 1e8,
        "moe_shared_bytes": 2e9,
        "kv_bytes_per_token": 10 * 2 * 64 * 2 * 2.0,
    }
    assert all(r.source == "declared" for r in declared_facts(dep))
    bare = Deployment(name="d", model="m", endpoint="http://h:8080/v1")  # type: ignore[arg-type]
    assert declared_facts(bare) == []
