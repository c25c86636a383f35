"""The simulator's metrics pages, in the Prometheus text format: ``/metrics`` and a DCGM
exporter's ``/dcgm/metrics``.

Each deployment's ``metric_style`` chooses whose ``/metrics`` names it is shown under (the
simulator's own, or one of five real engines' sets, only those names). A page with several
styles shows each deployment's samples in its own style, so the diagnosis's name map is tested
against every engine at once; every page has the process's ``process_start_time_seconds``, so
a restarted server is seen as one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Literal

from sparkcap.servers.sim.engine import Engine, Histogram
from sparkcap.servers.sim.profile import MetricStyle

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
    """The simulator's own page: its counters and queue gauges, then the KV gauge and
    preemption counter."""
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
