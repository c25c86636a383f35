"""The options of each probe (and of an open-loop replay), one model a probe, told apart by
``kind``: the CLI, fleet files and the probes themselves all take these, so an option means the
same everywhere and a typo is rejected."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from sparkcap.config.base import MAX_TOKENS, OutputTokens, StreamWorkloadName, Strict


class PrefillInterferenceOptions(Strict):
    """A long uncached prompt sent while background streams decode; short probes measure
    TTFT throughout (the study: a 32k prompt stalled Qwen's decode ~16 s)."""

    kind: Literal["prefill-interference"] = "prefill-interference"
    background_streams: int = Field(4, ge=1, le=256)
    background_tokens: int = Field(400, ge=2, le=MAX_TOKENS)
    long_prompt_tokens: int = Field(4000, ge=1, le=MAX_TOKENS)
    settle_s: float = Field(2.0, ge=0)
    probe_interval_s: float = Field(0.5, gt=0)
    probe_tokens: int = Field(4, ge=1, le=MAX_TOKENS)
    tail_s: float = Field(2.0, ge=0)


class PromptCacheOptions(Strict):
    """A long document cold, then warm with other questions, then a control document."""

    kind: Literal["prompt-cache"] = "prompt-cache"
    document_tokens: int = Field(4000, ge=1, le=MAX_TOKENS)
    warm_requests: int = Field(3, ge=1, le=100)
    answer_tokens: int = Field(4, ge=1, le=MAX_TOKENS)


class OutputLengthOptions(Strict):
    """One concurrency at several output lengths (one warm-up wave first)."""

    kind: Literal["output-length"] = "output-length"
    concurrency: int = Field(8, ge=1, le=4096)
    lengths: tuple[OutputTokens, ...] = Field((400, 1000), min_length=1)
    workload: StreamWorkloadName = "prose"
    trials: int = Field(2, ge=1, le=5)

    @field_validator("lengths")
    @classmethod
    def _lengths(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if any(n < 2 for n in v):
            raise ValueError("output lengths must be at least 2 tokens")
        return v


class MixedOptions(Strict):
    """Code and prose streams in one synchronized wave."""

    kind: Literal["mixed"] = "mixed"
    concurrency: int = Field(8, ge=2, le=4096)
    code_share: float = Field(0.5, gt=0, lt=1)
    trials: int = Field(2, ge=1, le=5)
    max_tokens: int | None = Field(None, ge=2, le=MAX_TOKENS)


class GapAttributionOptions(Strict):
    """Code and prose at one concurrency, then one factor of the difference changed at a time
    (temperature, output length), so dbt can say how much of code's advantage each explains.

    The concurrency is declared, not read from the night's capacity: probes run before the
    night's dbt build, so no capacity of this night exists yet when they do."""

    kind: Literal["gap-attribution"] = "gap-attribution"
    concurrency: int = Field(4, ge=1, le=4096)
    trials: int = Field(3, ge=1, le=5)
    # code's length for a quick probe; every stream is scaled by the same factor, so prose
    # keeps its 0.3-0.6 of code's length and the length factor stays in the comparison
    max_tokens: int | None = Field(None, ge=2, le=MAX_TOKENS)


class ContextLadderOptions(Strict):
    """Single prompts from ``start_tokens`` up to the served context, each rung cold and warm
    while background streams decode (the study never reached full context).

    ``context_tokens`` None: the server's own figure (llama-server's per-slot ``n_ctx``, vLLM's
    ``max_model_len``), else the deployment's declared one; with neither the ladder climbs
    until the server refuses a prompt. ``step_tokens`` set: rungs that far apart instead of
    ``step_factor`` times the last."""

    kind: Literal["context-ladder"] = "context-ladder"
    start_tokens: int = Field(1024, ge=16, le=MAX_TOKENS)
    step_factor: float = Field(2.0, gt=1.0, le=16.0)
    step_tokens: int | None = Field(None, ge=16, le=MAX_TOKENS)
    context_tokens: int | None = Field(None, ge=32, le=MAX_TOKENS)
    background_streams: int = Field(2, ge=1, le=64)
    # each background request's length: the probe waits out one after its last rung (they
    # restart until it is done), so short; a restart inside a prefill waits with it
    background_tokens: int = Field(128, ge=2, le=MAX_TOKENS)
    answer_tokens: int = Field(32, ge=2, le=4096)


class ReplayOptions(Strict):
    """Open-loop arrivals at one deployment: independent Poisson streams of code and prose
    requests (and long prompts), each timed from its *scheduled* start, so a client that
    sends late records a late request (coordinated omission), never a shorter wait.

    The rates come from the plan (``marts.fct_replay_plan``: the rate plan's requests a
    second by open-loop capacity, or the burst plan's streams by Little's law at the measured
    stream durations) times ``rate_factor``; the seed fixes the
    schedule, so two replays of one plan at one factor send the same requests at the same
    instants. ``client_stall_s`` blocks the client's own event loop that long at
    ``client_stall_at_s``: the self-check that shows what a stalled client does to a
    send-time TTFT and to a scheduled-start one."""

    kind: Literal["replay"] = "replay"
    duration_s: float = Field(60.0, gt=0, le=86_400)
    seed: int = Field(1, ge=0, le=2**31 - 1)
    rate_factor: float = Field(1.0, gt=0, le=100)
    planned_streams: float = Field(..., ge=0, le=1 << 20)
    code_per_s: float = Field(0.0, ge=0, le=10_000)
    prose_per_s: float = Field(0.0, ge=0, le=10_000)
    long_per_min: float = Field(0.0, ge=0, le=10_000)
    long_prompt_tokens: int = Field(32_000, ge=1, le=MAX_TOKENS)
    code_tokens: int | None = Field(None, ge=2, le=MAX_TOKENS)
    prose_tokens: int | None = Field(None, ge=2, le=MAX_TOKENS)
    client_stall_s: float = Field(0.0, ge=0, le=600)
    client_stall_at_s: float = Field(0.0, ge=0)
    # the plan's prefill budget (fct_plan.max_below_threshold_share), checked by the verdict
    max_below_threshold_share: float | None = Field(None, ge=0, le=1)
    # one `sparkcap replay` across the fleet: its deployments' replays are judged together
    # (fct_replay_fleet), never with another replay at the same factor and seed
    replay_id: str | None = Field(None, pattern=r"^[0-9a-f]{6,32}$")
    # the plan the rates came from: the rate plan (open-loop capacity) or the burst plan
    plan_kind: Literal["rate", "burst"] | None = None
    # a step of one `sparkcap replay --search`: its steps are read together (fct_replay_search)
    search_id: str | None = Field(None, pattern=r"^[0-9a-f]{6,32}$")


ProbeName = Literal[
    "prefill-interference",
    "prompt-cache",
    "output-length",
    "mixed",
    "gap-attribution",
    "context-ladder",
]
# One options model per probe, told apart by ``kind``: the CLI, fleet files and the probes
# themselves all take these, so an option means the same everywhere and a typo is rejected.
ProbeOptions = Annotated[
    PrefillInterferenceOptions
    | PromptCacheOptions
    | OutputLengthOptions
    | MixedOptions
    | GapAttributionOptions
    | ContextLadderOptions,
    Field(discriminator="kind"),
]
_PROBE_ADAPTER: Any = None


def probe_options(kind: str, **options: Any) -> ProbeOptions:
    """The validated options of probe ``kind`` (unknown options and bad values rejected)."""
    global _PROBE_ADAPTER
    from pydantic import TypeAdapter

    if _PROBE_ADAPTER is None:
        _PROBE_ADAPTER = TypeAdapter(ProbeOptions)
    result: ProbeOptions = _PROBE_ADAPTER.validate_python({**options, "kind": kind})
    return result
