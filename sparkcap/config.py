"""Validated configuration: deployments, workloads and sweep plans.

Every way into sparkcap (CLI flags, fleet files, flow parameters) is turned into these models
first, so a bad value is rejected with its location before anything is sent or written.
API keys are never part of a config: a config names the environment variable that holds one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    HttpUrl,
    SecretStr,
    field_validator,
    model_validator,
)

WorkloadName = Literal["code", "prose"]
# how much of a fleet file's plan a night runs (pipeline.PROFILES says what each changes)
Profile = Literal["full", "demo", "smoke"]
EnvVarName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Timeouts(Strict):
    """Client timeouts. httpx's 5 s default would abort any long prefill, so all are explicit."""

    connect_s: float = Field(10.0, gt=0)
    read_idle_s: float = Field(300.0, gt=0, description="longest silence between two reads")
    total_s: float = Field(1800.0, gt=0, description="deadline for one whole request")


class DeploymentBase(Strict):
    """What a deployment is, however it is given (CLI flags or a fleet file): one definition,
    so a fleet file and ``sparkcap sweep`` accept the same options with the same checks."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    model: str = Field(min_length=1)
    nodes: int = Field(1, ge=1)
    hardware: str = ""
    replicas: int = Field(1, ge=1, description="identical replicas; one is measured")
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    extra_body: dict[str, Any] = Field(default_factory=dict)
    # Header values are secrets unless proven otherwise (Azure's api-key, Cloudflare Access):
    # kept as SecretStr, so every dump (raw.runs.config_json, logs, Prefect) shows only names.
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    header_env: dict[str, EnvVarName] = Field(
        default_factory=dict, description="header name -> variable holding its value"
    )
    parallel_slots: int | None = Field(None, ge=1)
    continuous_usage: bool = Field(
        False, description="ask for per-chunk usage (vLLM's continuous_usage_stats)"
    )
    reports_usage: bool = True
    metrics_url: HttpUrl | None = None
    ca_bundle: Path | None = None
    timeouts: Timeouts = Field(default_factory=lambda: Timeouts())

    @field_validator("headers", "header_env")
    @classmethod
    def _no_auth_header(cls, v: dict[str, Any]) -> dict[str, Any]:
        if any(k.lower() == "authorization" for k in v):
            raise ValueError("put the API key in an environment variable named by api_key_env")
        return v


class Deployment(DeploymentBase):
    """A deployment with its endpoint known: what a sweep measures."""

    endpoint: HttpUrl = Field(description="OpenAI-compatible base URL, e.g. http://host:8000/v1")

    @property
    def chat_url(self) -> str:
        return str(self.endpoint).rstrip("/") + "/chat/completions"


class SearchPlan(Strict):
    """An adaptive search for the largest integer concurrency that passes (``--search``).

    Doubling from 1 until a level fails, then bisection; each level gets counted trials until
    the bootstrap interval of its median clears the threshold at ``confidence`` or
    ``trials_max`` is reached (the level then *straddles* it and the answer is an interval).
    A sustain wave at the found capacity, ``sustain_factor`` times the full output length
    (4x a default trial), confirms it; one that falls moves the answer down and says so.
    """

    max_level: int = Field(32, ge=1, le=4096, description="highest concurrency tried")
    trials_max: int = Field(3, ge=1, le=10)
    confidence: float = Field(0.9, gt=0.5, lt=1)
    # A trial's length: ``trial_share`` of each stream's output length (at least
    # ``min_trial_tokens``), or ``trial_tokens`` exactly. Every token is timestamped, so a
    # quarter-length stream measures its rate as well as a full one; where a longer context
    # slows decoding, the sustain wave (``sustain_factor`` x the full length) catches it.
    trial_share: float = Field(0.25, gt=0, le=1)
    min_trial_tokens: int = Field(32, ge=2)
    trial_tokens: int | None = Field(None, ge=2)
    # a warm-up only settles the server's batch shape, so it is short
    warmup_tokens: int = Field(32, ge=2)
    # the sustain wave's length as a multiple of each stream's full output length: the default
    # holds the answer at the length users ask for (4x a trial); 0: no sustain wave
    sustain_factor: float = Field(1.0, ge=0, le=20)
    # a failed sustain wave moves the answer down one level and sustains again, this often
    sustain_retries: int = Field(2, ge=0, le=8)


class SweepPlan(Strict):
    levels: tuple[int, ...] = (1, 2, 4, 8, 16)
    trials: int = Field(3, ge=1, le=5)
    warmup: bool = True
    max_tokens: int | None = Field(None, ge=2, description="override the workload's length")
    # A wave the *client* spoiled (its own stalls or a ragged release) says nothing about the
    # server, so it is measured again, at most this many extra times; the spoiled wave stays in
    # raw, marked superseded. Server-side failures are findings and are never re-run.
    max_remeasures: int = Field(2, ge=0, le=5)
    # The same tolerances dbt judges with (vars timing_error_tolerance, start_skew_tolerance;
    # a unit test keeps the defaults equal): relative rate error from loop stalls, and start
    # skew as a share of the median stream's decode span.
    timing_tolerance: float = Field(0.005, gt=0, lt=1)
    skew_tolerance: float = Field(0.05, gt=0, lt=1)
    # Load-generating processes a wave is spread over (None: one per core this process may
    # use). 1 runs every stream on the sweep's own event loop. See loadgen/procs.py.
    client_processes: int | None = Field(None, ge=1, le=256)
    # A wave is spread only as far as this many streams per process: below it, releasing
    # from several processes costs more start skew (a process not scheduled at the instant)
    # than one loop's stamping of a few streams loses.
    min_streams_per_process: int = Field(16, ge=1, le=4096)
    # set: the levels are searched (see SearchPlan) instead of swept as a grid
    search: SearchPlan | None = None

    @field_validator("levels", mode="before")
    @classmethod
    def _parse_levels(cls, v: Any) -> Any:
        if isinstance(v, str):
            try:
                return tuple(int(x) for x in v.split(",") if x.strip())
            except ValueError as exc:
                raise ValueError(f"levels must be comma-separated integers, got {v!r}") from exc
        return v

    @model_validator(mode="after")
    def _check_levels(self) -> SweepPlan:
        if not self.levels:
            raise ValueError("at least one concurrency level is needed")
        bad = [lv for lv in self.levels if lv < 1 or lv > 4096]
        if bad:
            raise ValueError(f"concurrency levels must be between 1 and 4096, got {bad}")
        if len(set(self.levels)) != len(self.levels):
            raise ValueError("concurrency levels must be distinct")
        object.__setattr__(self, "levels", tuple(sorted(self.levels)))
        return self


class SweepRequest(Strict):
    """One deployment × workload sweep, as the CLI and the flows ask for it."""

    deployment: Deployment
    workload: WorkloadName
    plan: SweepPlan = Field(default_factory=lambda: SweepPlan())
    seed: int = 0


class PrefillInterferenceOptions(Strict):
    """A long uncached prompt sent while background streams decode; short probes measure
    TTFT throughout (the study: a 32k prompt stalled Qwen's decode ~16 s)."""

    kind: Literal["prefill-interference"] = "prefill-interference"
    background_streams: int = Field(4, ge=1, le=256)
    background_tokens: int = Field(400, ge=2)
    long_prompt_tokens: int = Field(4000, ge=1)
    settle_s: float = Field(2.0, ge=0)
    probe_interval_s: float = Field(0.5, gt=0)
    probe_tokens: int = Field(4, ge=1)
    tail_s: float = Field(2.0, ge=0)


class PromptCacheOptions(Strict):
    """A long document cold, then warm with other questions, then a control document."""

    kind: Literal["prompt-cache"] = "prompt-cache"
    document_tokens: int = Field(4000, ge=1)
    warm_requests: int = Field(3, ge=1, le=100)
    answer_tokens: int = Field(4, ge=1)


class OutputLengthOptions(Strict):
    """One concurrency at several output lengths (one warm-up wave first)."""

    kind: Literal["output-length"] = "output-length"
    concurrency: int = Field(8, ge=1, le=4096)
    lengths: tuple[int, ...] = Field((400, 1000), min_length=1)
    workload: WorkloadName = "prose"
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
    max_tokens: int | None = Field(None, ge=2)


ProbeName = Literal["prefill-interference", "prompt-cache", "output-length", "mixed"]
# One options model per probe, told apart by ``kind``: the CLI, fleet files and the probes
# themselves all take these, so an option means the same everywhere and a typo is rejected.
ProbeOptions = Annotated[
    PrefillInterferenceOptions | PromptCacheOptions | OutputLengthOptions | MixedOptions,
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


def redacted_config(obj: BaseModel) -> dict[str, Any]:
    """A JSON-able dump for ``raw.runs.config_json``: names of key variables, never values."""
    return obj.model_dump(mode="json")
