"""The simulator speaks each engine's /metrics names and server facts, and only those.

The bottleneck diagnosis maps vLLM's, SGLang's, llama-server's, TGI's and TensorRT-LLM's
names onto one vocabulary and records a name the engine lacks as unavailable. Its tests need a
server that shows exactly each engine's set (a stray name would hide a wrong map), parseable
by Prometheus's own parser, with values the test knows.
"""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkcap.servers.sim.profile import MetricStyle, SimProfile
from sparkcap.servers.sim.routes import build_info
from sparkcap.servers.sim.server import SimServer
from tests.support.sims import fast_profile

pytestmark = pytest.mark.integration

N_REQUESTS = 3
MAX_TOKENS = 12

EXPECTED: dict[MetricStyle, dict[str, str]] = {
    "sim": {
        "sim:requests_total": "counter",
        "sim:rejected_total": "counter",
        "sim:generation_tokens_total": "counter",
        "sim:prompt_tokens_total": "counter",
        "sim:spec_decode_num_draft_tokens_total": "counter",
        "sim:spec_decode_num_accepted_tokens_total": "counter",
        "sim:iterations_total": "counter",
        "sim:num_requests_running": "gauge",
        "sim:num_requests_waiting": "gauge",
        "sim:kv_cache_usage_perc": "gauge",
        "sim:num_preemptions_total": "counter",
    },
    "vllm": {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:num_preemptions_total": "counter",
        "vllm:prompt_tokens_total": "counter",
        "vllm:generation_tokens_total": "counter",
        "vllm:spec_decode_num_draft_tokens_total": "counter",
        "vllm:spec_decode_num_accepted_tokens_total": "counter",
        "vllm:request_queue_time_seconds": "histogram",
    },
    "sglang": {
        "sglang:num_running_reqs": "gauge",
        "sglang:num_queue_reqs": "gauge",
        "sglang:token_usage": "gauge",
        "sglang:prompt_tokens_total": "counter",
        "sglang:generation_tokens_total": "counter",
        "sglang:spec_accept_length": "gauge",
        "sglang:num_retracted_requests_total": "counter",
        "sglang:queue_time_seconds": "histogram",
    },
    "llamacpp": {
        "llamacpp:requests_processing": "gauge",
        "llamacpp:requests_deferred": "gauge",
        "llamacpp:prompt_tokens_total": "counter",
        "llamacpp:tokens_predicted_total": "counter",
        "llamacpp:n_decode_total": "counter",
        "llamacpp:spec_decode_num_draft_tokens_total": "counter",
        "llamacpp:spec_decode_num_accepted_tokens_total": "counter",
    },
    "tgi": {
        "tgi_batch_current_size": "gauge",
        "tgi_queue_size": "gauge",
        "tgi_request_generated_tokens": "histogram",
        "tgi_request_input_length": "histogram",
        "tgi_request_queue_duration": "histogram",
    },
    "trtllm": {
        "trtllm_request_success_total": "counter",
        "trtllm_request_queue_time_seconds": "histogram",
        "trtllm_time_to_first_token_seconds": "histogram",
    },
}
UNLABELLED = {"llamacpp", "tgi"}
# the process's own gauge, on every page whatever the style (a restart is seen by it)
PROCESS = {"process_start_time_seconds": "gauge"}


def _profile(model: str, style: MetricStyle) -> SimProfile:
    return fast_profile(
        model,
        step_s1=0.005,
        draft_tokens=2,
        acceptance_noise="low",
        prompt_acceptance_spread=0.0,
        metric_style=style,
        kv_capacity_tokens=10_000,
        max_slots=2,  # the third request queues: a queue time above 0
        n_ctx=8192,
        weight_bytes=4.5e9,
        n_params=8_000_000_000,
    )


Families = dict[str, tuple[str, list[tuple[str, dict[str, str], float]]]]


def _families(text: str) -> Families:
    """Family name as its TYPE line declares it (counters with ``_total``) → type, samples."""
    out: Families = {}
    for fam in text_string_to_metric_families(text):
        name = fam.name + "_total" if fam.type == "counter" else fam.name
        out[name] = (fam.type, [(s.name, s.labels, s.value) for s in fam.samples])
    return out


def _load(base_url: str, model: str) -> None:
    """N_REQUESTS at once, so that with 2 slots one of them queues."""
    with httpx.Client(base_url=base_url, timeout=30) as client:
        bodies = [
            {
                "model": model,
                "messages": [{"role": "user", "content": f"write python code {i}"}],
                "max_tokens": MAX_TOKENS,
                "stream": True,
            }
            for i in range(N_REQUESTS)
        ]
        streams = [client.stream("POST", "/v1/chat/completions", json=b) for b in bodies]
        responses = [s.__enter__() for s in streams]
        try:
            for r in responses:
                r.raise_for_status()
                body = r.read()
                assert b"[DONE]" in body
        finally:
            for s in streams:
                s.__exit__(None, None, None)


def _value(fams: Families, family: str, sample: str | None = None, **labels: str) -> float:
    _, samples = fams[family]
    (v,) = [
        val
        for name, lab, val in samples
        if name == (sample or family) and all(lab.get(k) == x for k, x in labels.items())
    ]
    return float(v)


@pytest.mark.parametrize("style", list(EXPECTED))
def test_each_style_shows_exactly_its_engines_names(style: MetricStyle) -> None:
    with SimServer([_profile("m", style)]) as sim:
        _load(sim.base_url, "m")
        text = httpx.get(f"{sim.base_url}/metrics").text
    fams = _families(text)
    assert {n: t for n, (t, _) in fams.items()} == EXPECTED[style] | PROCESS
    for family, (_, samples) in fams.items():
        if family in PROCESS:
            continue
        for _, labels, _ in samples:
            has_model = labels.get("model_name") == "m"
            assert has_model is (style not in UNLABELLED)
    # values the load makes known: 3 requests of 12 tokens, one queued behind two slots
    generated = N_REQUESTS * MAX_TOKENS
    if style in ("sim", "vllm", "sglang"):
        assert _value(fams, f"{style}:generation_tokens_total", model_name="m") == generated
    if style == "llamacpp":
        assert _value(fams, "llamacpp:tokens_predicted_total") == generated
        assert _value(fams, "llamacpp:n_decode_total") > 0
        assert _value(fams, "llamacpp:spec_decode_num_accepted_tokens_total") > 0
    if style == "vllm":
        count = _value(
            fams, "vllm:request_queue_time_seconds", "vllm:request_queue_time_seconds_count"
        )
        assert count == N_REQUESTS
        queued = _value(
            fams, "vllm:request_queue_time_seconds", "vllm:request_queue_time_seconds_sum"
        )
        assert queued > 0
        assert _value(fams, "vllm:spec_decode_num_accepted_tokens_total", model_name="m") > 0
    if style == "sglang":
        assert _value(fams, "sglang:spec_accept_length", model_name="m") > 1.5  # 2 drafts, p 0.8
        assert (
            _value(
                fams,
                "sglang:queue_time_seconds",
                "sglang:queue_time_seconds_count",
                model_name="m",
            )
            == N_REQUESTS
        )
    if style == "tgi":
        assert _value(fams, "tgi_request_generated_tokens", "tgi_request_generated_tokens_sum") == (
            generated
        )
        assert _value(fams, "tgi_request_queue_duration", "tgi_request_queue_duration_count") == 3
    if style == "trtllm":
        assert _value(fams, "trtllm_request_success_total") == N_REQUESTS
        assert (
            _value(
                fams,
                "trtllm_time_to_first_token_seconds",
                "trtllm_time_to_first_token_seconds_bucket",
                le="+Inf",
            )
            == N_REQUESTS
        )


def test_one_server_shows_each_deployment_in_its_own_style() -> None:
    profiles = [_profile(f"{style}-model", style) for style in EXPECTED]
    with SimServer(profiles) as sim:
        _load(sim.base_url, "vllm-model")
        text = httpx.get(f"{sim.base_url}/metrics").text
    fams = _families(text)
    assert {n: t for n, (t, _) in fams.items()} == {
        n: t for names in EXPECTED.values() for n, t in names.items()
    } | PROCESS
    # a labelled style's samples name its own model only
    for style in ("sim", "vllm", "sglang", "trtllm"):
        for name in EXPECTED[style]:
            models = {lab.get("model_name") for _, lab, _ in fams[name][1]}
            assert models == {f"{style}-model"}
    assert _value(fams, "vllm:generation_tokens_total", model_name="vllm-model") == 36
    assert _value(fams, "llamacpp:tokens_predicted_total") == 0  # unlabelled, its own engine


def test_models_and_props_give_each_engines_facts() -> None:
    profiles = [_profile("ll", "llamacpp"), _profile("vl", "vllm"), fast_profile("plain")]
    with SimServer(profiles) as sim:
        models = httpx.get(f"{sim.endpoint}/models").json()["data"]
        props = httpx.get(f"{sim.base_url}/props").json()
        props_by_name = httpx.get(f"{sim.base_url}/props", params={"model": "ll"}).json()
        missing = httpx.get(f"{sim.base_url}/props", params={"model": "vl"})
    by_id = {m["id"]: m for m in models}
    assert by_id["ll"] == {
        "id": "ll",
        "object": "model",
        "owned_by": "llamacpp",
        "meta": {
            "n_params": 8_000_000_000,
            "size": 4_500_000_000,
            "n_ctx_train": 8192,
            "n_embd": 4096,
        },
    }
    assert by_id["vl"] == {"id": "vl", "object": "model", "owned_by": "vllm", "max_model_len": 8192}
    assert by_id["plain"] == {"id": "plain", "object": "model", "owned_by": "sim"}
    assert (
        props
        == props_by_name
        == {
            "default_generation_settings": {"n_ctx": 8192},
            "total_slots": 2,
            "model_path": "ll.gguf",
            "build_info": build_info("sim-1"),
        }
    )
    assert missing.status_code == 404
    with SimServer([fast_profile("plain")]) as sim:
        assert httpx.get(f"{sim.base_url}/props").status_code == 404
