"""What can change a number between nights, discovered against vLLM, SGLang and llama-server
shaped answers (httpx.MockTransport, no socket): the engine's version, the served model, the
server's start; which hostile values are refused (never shown when they name credentials);
which endpoints each server is asked; and the settings hash sparkcap records itself."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import httpx
import pytest

from sparkcap.config.deployment import Deployment
from sparkcap.loadgen.discover import (
    DISCOVERY,
    FactRow,
    discover_all,
    discover_facts,
    metrics_context_rows,
    settings_hash,
    sparkcap_facts,
)
from tests.unit.loadgen.test_discover import Handler, respond
from tests.unit.loadgen.test_discover import discover as discover_with

pytestmark = pytest.mark.unit

STARTED_S = 1_767_225_600.5  # 2026-01-01
VLLM_MODELS = {
    "data": [{"id": "qwen", "owned_by": "vllm", "root": "Qwen/Qwen3-8B", "max_model_len": 8192}]
}
VLLM_METRICS = (
    "# TYPE process_start_time_seconds gauge\n"
    f"process_start_time_seconds {STARTED_S}\n"
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{model_name="qwen"} 0\n'
)
CONTEXT = {"engine_version", "model_id", "model_root", "server_started_at"}


def pages(by_path: dict[str, Any], asked: list[str] | None = None) -> Handler:
    def handle(request: httpx.Request) -> httpx.Response:
        if asked is not None:
            asked.append(request.url.path)
        body = by_path.get(request.url.path)
        if isinstance(body, int):
            return respond(body)
        if body is None:
            return respond(404)
        text = body if isinstance(body, str) else json.dumps(body)
        return respond(200, text.encode())

    return handle


def dep(**kw: Any) -> Deployment:
    base: dict[str, Any] = {"name": "d", "model": "qwen", "endpoint": "http://h:8000/v1"}
    return Deployment(**{**base, **kw})


def discover(handler: Handler, d: Deployment | None = None, **kw: Any) -> list[FactRow]:
    """What discovery with the run context finds against ``handler``'s pages."""
    return discover_with(handler, d or dep(), context=True, **kw)


def context(rows: list[FactRow]) -> dict[tuple[str, str], float | str | None]:
    return {
        (r.fact, r.source): r.value if r.text_value is None else r.text_value
        for r in rows
        if r.fact in CONTEXT
    }


def problems(rows: list[FactRow]) -> list[str]:
    return [f"{r.source}: {r.detail}" for r in rows if r.fact == DISCOVERY]


def test_vllm_gives_its_version_root_and_start() -> None:
    asked: list[str] = []
    handler = pages(
        {"/v1/models": VLLM_MODELS, "/version": {"version": "0.11.2"}, "/metrics": VLLM_METRICS},
        asked,
    )
    rows = discover(handler, listing=VLLM_MODELS)  # the preflight's listing, not asked again
    assert context(rows) == {
        ("model_id", "models-listing"): "qwen",
        ("model_root", "vllm-models"): "Qwen/Qwen3-8B",
        ("engine_version", "vllm-version"): "0.11.2",
        ("server_started_at", "metrics"): STARTED_S,
    }
    assert problems(rows) == []
    assert sorted(asked) == ["/metrics", "/version"]


def test_sglang_and_llama_server_say_their_versions_where_they_do() -> None:
    sglang_models = {"data": [{"id": "qwen", "owned_by": "sglang"}]}
    info = {"version": "0.4.9.post2", "api_key": "sk-not-to-be-kept", "tp_size": 1}
    rows = discover(pages({"/get_server_info": info}), listing=sglang_models)
    assert context(rows)[("engine_version", "sglang-server-info")] == "0.4.9.post2"
    assert "sk-not-to-be-kept" not in repr(rows)

    llama_models = {"data": [{"id": "qwen", "owned_by": "llamacpp", "meta": {"n_ctx_train": 4}}]}
    props = {"total_slots": 2, "build_info": "b6000-1a2b3c4"}
    asked: list[str] = []
    # llama-server without --metrics answers 501: no page, like a 404, not a problem
    rows = discover(pages({"/props": props, "/metrics": 501}, asked), listing=llama_models)
    assert context(rows)[("engine_version", "llama-props")] == "b6000-1a2b3c4"
    assert problems(rows) == [] and sorted(asked) == ["/metrics", "/props"]


def test_an_unknown_server_is_asked_only_its_metrics_page() -> None:
    asked: list[str] = []
    listing = {"data": [{"id": "qwen", "owned_by": "organization-owner"}]}
    page = 'tgi_build_info{version="3.3.4",sha="abc"} 1\n'
    rows = discover(pages({"/metrics": page}, asked), listing=listing)
    assert asked == ["/metrics"]
    assert context(rows)[("engine_version", "metrics")] == "3.3.4"
    # a metrics_url elsewhere is where the page is read
    asked.clear()
    discover(pages({}, asked), dep(metrics_url="http://m:9400/x/metrics"), listing=listing)
    assert asked == ["/x/metrics"]


def test_without_context_nothing_more_is_asked_or_recorded() -> None:
    asked: list[str] = []
    handler = pages({"/version": {"version": "0.11.2"}, "/metrics": VLLM_METRICS}, asked)

    async def go() -> list[FactRow]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await discover_facts(dep(), client=client, listing=VLLM_MODELS)

    assert context(asyncio.run(go())) == {} and asked == []


@pytest.mark.parametrize(
    ("by_path", "refused"),
    [
        (
            {"/version": {"version": "0.11.2; rm -rf /"}},
            "refused engine_version '0.11.2; rm -rf /'",
        ),
        ({"/version": {"version": 11}}, "refused engine_version 11"),
        ({"/version": {"version": "x" * 81}}, "refused engine_version 'xxx"),
        ({"/metrics": "process_start_time_seconds 1e20\n"}, "refused server_started_at 1e+20"),
        ({"/metrics": "process_start_time_seconds -1\n"}, "refused server_started_at -1.0"),
        ({"/metrics": "process_start_time_seconds NaN\n"}, "refused server_started_at nan"),
        ({"/metrics": "{{{ not prometheus"}, "metrics: GET /metrics: not Prometheus text"),
        ({"/metrics": 500}, "metrics: GET /metrics: HTTP 500"),
        ({"/version": 503}, "vllm-version: GET /version: HTTP 503"),
    ],
)
def test_hostile_answers_are_refused_by_name(by_path: dict[str, Any], refused: str) -> None:
    rows = discover(pages(by_path), listing=VLLM_MODELS)
    (problem,) = problems(rows)
    assert refused in problem
    assert all(
        r.fact not in ("engine_version", "server_started_at") for r in rows if r.fact != DISCOVERY
    )


@pytest.mark.parametrize(
    ("root", "refused", "secret"),
    [
        ("s3://AKIAKEY:very-secret@bucket/qwen", "it names credentials", "very-secret"),
        ("m" * 257, "not a printable name", None),
        ("qwen\x1b[2J", "not a printable name", None),
    ],
)
def test_a_hostile_model_root_is_refused(root: str, refused: str, secret: str | None) -> None:
    listing = {"data": [{"id": "qwen", "owned_by": "vllm", "root": root}]}
    rows = discover(pages({}), listing=listing)
    (problem,) = problems(rows)
    assert problem.startswith("vllm-models: refused model_root") and refused in problem
    assert ("model_id", "models-listing") in context(rows)
    assert ("model_root", "vllm-models") not in context(rows)
    if secret is not None:
        assert secret not in repr(rows)


def test_the_latest_process_start_counts() -> None:
    page = (
        'process_start_time_seconds{pid="1"} 1767225600\n'
        'process_start_time_seconds{pid="2"} 1767229200\n'
    )
    (row,) = metrics_context_rows(page)
    assert (row.fact, row.value) == ("server_started_at", 1_767_229_200.0)
    assert not math.isnan(row.value or math.nan)


def test_settings_hash_follows_the_measured_settings_only(monkeypatch: pytest.MonkeyPatch) -> None:
    base = settings_hash(dep())
    assert len(base) == 16 and int(base, 16) >= 0
    assert settings_hash(dep()) == base  # stable: nothing random, nothing ordered by chance
    # what a measurement depends on changes it
    assert settings_hash(dep(extra_body={"ignore_eos": True})) != base
    assert settings_hash(dep(parallel_slots=4)) != base
    assert settings_hash(dep(endpoint="http://h:8001/v1")) != base
    assert settings_hash(dep(facts={"memory_bandwidth_gb_s": 273})) != base
    # secrets and labels do not: headers, key variables, the URL's credentials, the name
    same = [
        dep(headers={"x-api-key": "sk-secret"}),
        dep(api_key_env="SOME_KEY"),
        dep(endpoint="http://user:pw@h:8000/v1"),
        dep(name="renamed", hardware="spark"),
    ]
    assert all(settings_hash(d) == base for d in same)


def test_sparkcap_facts_are_the_hash_and_the_client_host() -> None:
    rows = sparkcap_facts(dep(headers={"x-api-key": "sk-secret"}), "spark-7")
    got = {r.fact: (r.text_value, r.source) for r in rows}
    assert got == {
        "settings_hash": (settings_hash(dep()), "sparkcap"),
        "client_host": ("spark-7", "sparkcap"),
    }
    assert "sk-secret" not in repr(rows)


def test_a_sweeps_discovery_asks_for_the_context(monkeypatch: pytest.MonkeyPatch) -> None:
    handler = pages({"/version": {"version": "0.11.2"}, "/metrics": VLLM_METRICS})
    real = httpx.AsyncClient

    def mocked(*args: Any, **kw: Any) -> httpx.AsyncClient:
        return real(transport=httpx.MockTransport(handler))

    monkeypatch.setattr(httpx, "AsyncClient", mocked)
    (rows,) = asyncio.run(discover_all([dep()], {"d": VLLM_MODELS}))
    assert context(rows)[("engine_version", "vllm-version")] == "0.11.2"
