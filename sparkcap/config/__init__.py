"""Validated configuration: deployments, workloads and sweep plans.

Every way into sparkcap (CLI flags, fleet files, flow parameters) is turned into these models
first, so a bad value is rejected with its location before anything is sent or written.
API keys are never part of a config: a config names the environment variable that holds one.
"""

from __future__ import annotations

import base64
import itertools
import json
import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    HttpUrl,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from sparkcap.config.facts import ModelFacts
from sparkcap.config.power import PowerSource
from sparkcap.config.sessions import SessionShape
from sparkcap.errors import OptionError

WorkloadName = Literal["code", "prose", "agent"]
# the workloads whose every request is one prompt (probes build theirs from these)
StreamWorkloadName = Literal["code", "prose"]
# how much of a fleet file's plan a night runs (night.plan.PROFILES says what each changes)
Profile = Literal["full", "demo", "smoke"]
EnvVarName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]

# Token lengths a config may ask for (output lengths, prompt and document sizes). A million is
# far above any model's output limit, and 20x it (the largest sustain factor) still fits the
# int32 token columns of the raw warehouse: a typo such as 3000000000 is refused up front
# instead of being sent, or wrapping where it is stored.
MAX_TOKENS = 1 << 20
OutputTokens = Annotated[int, Field(ge=2, le=MAX_TOKENS)]
# A timeout is a bound the night relies on: ``inf`` (YAML ``.inf``, or ``1e309``) would switch
# it off, so a timeout is finite and at most a day.
MAX_TIMEOUT_S = 86_400.0
# the JSON a request body may carry: nested this deep at most, integers of int64 (what orjson
# can write)
MAX_EXTRA_BODY_DEPTH = 32
_INT64 = (-(1 << 63), (1 << 63) - 1)
# RFC 9110 field names (tokens); values: visible ASCII, space and tab (httpx sends ASCII only,
# and a CR or LF would start another header)
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")


class Strict(BaseModel):
    # NaN and infinity are never a meaningful setting (``read_idle_s: .inf`` switches a
    # timeout off; ``gt``/``lt`` bounds do not catch NaN in every field)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Timeouts(Strict):
    """Client timeouts. httpx's 5 s default would abort any long prefill, so all are explicit."""

    connect_s: float = Field(10.0, gt=0, le=MAX_TIMEOUT_S)
    read_idle_s: float = Field(
        300.0, gt=0, le=MAX_TIMEOUT_S, description="longest silence between two reads"
    )
    total_s: float = Field(
        1800.0, gt=0, le=MAX_TIMEOUT_S, description="deadline for one whole request"
    )


def deployment_name(model: str) -> str:
    """The deployment name a sweep or probe takes when none is given: the model's, with what a
    name may not hold (``/``, ``:``, spaces) made a dash."""
    return re.sub(r"[^A-Za-z0-9_.\-]+", "-", model).strip("-") or "deployment"


def url_without_credentials(url: str) -> str:
    """``url`` with any ``user:password@`` taken out: what may be stored or printed."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def header_problem(name: str, value: str) -> str | None:
    """Why ``name: value`` cannot be sent as an HTTP header (``None``: it can). The value is
    never part of the answer: header values are secrets."""
    if not _HEADER_NAME.fullmatch(name):
        return f"header name {name[:40]!r} is not a valid HTTP field name"
    if not _HEADER_VALUE.fullmatch(value):
        return (
            f"the value of header {name!r} must be printable ASCII (no line breaks, no other "
            "characters; the value is not shown)"
        )
    return None


def extra_body_problem(value: Any, where: str = "extra_body", depth: int = 0) -> str | None:
    """Why ``value`` cannot be sent as JSON exactly as given (``None``: it can).

    orjson writes NaN and infinity as ``null`` and refuses other non-JSON values only when the
    body is encoded, inside a wave: both are caught here, when the config is read.
    """
    if depth > MAX_EXTRA_BODY_DEPTH:
        return f"{where}: nested deeper than {MAX_EXTRA_BODY_DEPTH} levels"
    if value is None or isinstance(value, bool | str):
        return None
    if isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            return f"{where}: integer {value} does not fit in 64 bits"
        return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return f"{where}: {value} is not a JSON number (it would be sent as null)"
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"{where}: key {k!r} is not a string"
            problem = extra_body_problem(v, f"{where}.{k}", depth + 1)
            if problem is not None:
                return problem
        return None
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            problem = extra_body_problem(v, f"{where}[{i}]", depth + 1)
            if problem is not None:
                return problem
        return None
    return f"{where}: a {type(value).__name__} is not a JSON value"


def parse_extra_body(text: str | None, flag: str = "--extra-body") -> dict[str, Any]:
    """``--extra-body`` as a JSON object, refusing what JSON does not have (``NaN``,
    ``Infinity``) and nesting no request could need, with a message naming ``flag``."""
    if not text:
        return {}

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON number (it would be sent as null)")

    try:
        value = json.loads(text, parse_constant=no_constant)
    except RecursionError:
        raise OptionError(f"{flag} is nested too deeply") from None
    except ValueError as exc:
        raise OptionError(f"{flag} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise OptionError(f"{flag} must be a JSON object, got {type(value).__name__}")
    problem = extra_body_problem(value, flag)
    if problem is not None:
        raise OptionError(problem)
    return value


def parse_session_shape(text: str | None, workload: str, flag: str = "--sessions") -> SessionShape:
    """``--sessions turns=3,answer_tokens=48``: an agent session's shape on the command line,
    the fleet file's ``sessions:`` as NAME=VALUE pairs; what is not named keeps its default.
    Refused with one line naming ``flag``: a pair without ``=``, an unknown or repeated name,
    a value the shape does not allow, or a shape for a workload that sends no sessions."""
    if not text or not text.strip():
        return SessionShape()
    if workload != "agent":
        raise OptionError(f"{flag} shapes agent sessions; --workload {workload} sends none")
    given: dict[str, str] = {}
    for part in text.split(","):
        name, sep, value = (x.strip() for x in part.partition("="))
        if not sep or not name or not value:
            raise OptionError(f"{flag}: {part.strip()!r} is not NAME=VALUE")
        if name not in SessionShape.model_fields:
            known = ", ".join(SessionShape.model_fields)
            raise OptionError(f"{flag}: unknown {name!r} (choose from {known})")
        if name in given:
            raise OptionError(f"{flag}: {name} is given twice")
        given[name] = value
    try:
        return SessionShape.model_validate(given)
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(x) for x in e["loc"]) or "the shape"
        raise OptionError(f"{flag}: {loc}: {e['msg']}") from None


def parse_header_options(
    options: list[str] | None, flag: str = "--header"
) -> tuple[dict[str, str], dict[str, str]]:
    """``--header NAME:VALUE`` and ``NAME:env:VAR`` as (headers, header_env), every name and
    literal value checked; a message never echoes a value (they are secrets)."""
    headers: dict[str, str] = {}
    header_env: dict[str, str] = {}
    for option in options or []:
        name, sep, value = option.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not name:
            raise OptionError(f"{flag}: expected NAME:VALUE, got {name[:40]!r}…")
        if name in headers or name in header_env:
            raise OptionError(f"{flag}: header {name!r} is given twice")
        if value.startswith("env:"):
            header_env[name] = value.removeprefix("env:")
            problem = header_problem(name, "")
        else:
            headers[name] = value
            problem = header_problem(name, value)
        if problem is not None:
            raise OptionError(f"{flag}: {problem}")
    return headers, header_env


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
    # ``user:password`` taken out of the endpoint URL when it is read (see
    # ``_credentials_out_of_the_url``) and sent as HTTP Basic auth, as httpx would send them:
    # the endpoint itself is then stored and printed everywhere with no secret in it
    endpoint_credentials: SecretStr | None = None
    # Header values are secrets unless proven otherwise (Azure's api-key, Cloudflare Access):
    # kept as SecretStr, so every dump (raw.runs.config_json, logs, Prefect) shows only names.
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    header_env: dict[str, EnvVarName] = Field(
        default_factory=dict, description="header name -> variable holding its value"
    )
    parallel_slots: int | None = Field(None, ge=1)
    # the batch sizes the engine captured (vLLM's CUDA-graph capture sizes): a batch between
    # two is padded to the larger, and a padded batch can decode slower than a larger full one
    # (17-25 % dips at exactly those levels are reported on DGX Spark); a search checks the
    # first padded level after each size below its answer, where such a dip hides
    batch_buckets: tuple[int, ...] | None = Field(None, min_length=1, max_length=256)
    continuous_usage: bool = Field(
        False, description="ask for per-chunk usage (vLLM's continuous_usage_stats)"
    )
    reports_usage: bool = True
    # whether the deployment's streams are meant to reason (a thinking model with thinking on):
    # the study measured with it off, and a wave whose streams reasoned otherwise (or, "on",
    # did not) fails the data-quality expectation reasoning_as_intended; how to turn it off per
    # engine: docs/guides/reasoning-models.md
    reasoning: Literal["off", "on"] = Field(
        "off", description="off (the study's protocol) or on: what the streams must show"
    )
    metrics_url: HttpUrl | None = None
    ca_bundle: Path | None = None
    timeouts: Timeouts = Field(default_factory=lambda: Timeouts())
    # what the bottleneck diagnosis needs to know of the model and hardware (config.facts)
    facts: ModelFacts = Field(default_factory=lambda: ModelFacts())
    power: PowerSource | None = None  # where energy per wave is read (config.power)

    @field_validator("headers", "header_env")
    @classmethod
    def _no_auth_header(cls, v: dict[str, Any]) -> dict[str, Any]:
        if any(k.lower() == "authorization" for k in v):
            raise ValueError("put the API key in an environment variable named by api_key_env")
        for name, value in v.items():
            # a header_env value is a variable's name; its content is checked when it is read
            text = value.get_secret_value() if isinstance(value, SecretStr) else ""
            problem = header_problem(name, text)
            if problem is not None:
                raise ValueError(problem)
        return v

    @field_validator("batch_buckets", mode="before")
    @classmethod
    def _buckets_are_ints(cls, v: Any) -> Any:
        # YAML's `true` would otherwise pass as the batch size 1
        if isinstance(v, list | tuple) and any(type(b) is not int for b in v):
            raise ValueError("batch_buckets must be whole batch sizes")
        return v

    @field_validator("batch_buckets")
    @classmethod
    def _buckets_ascend(cls, v: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if v is not None and (
            any(not 1 <= b <= 4096 for b in v) or any(a >= b for a, b in itertools.pairwise(v))
        ):
            raise ValueError("batch_buckets must be ascending batch sizes from 1 to 4096")
        return v

    @field_validator("extra_body")
    @classmethod
    def _extra_body_is_json(cls, v: dict[str, Any]) -> dict[str, Any]:
        problem = extra_body_problem(v)
        if problem is not None:
            raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _credentials_out_of_the_url(self) -> DeploymentBase:
        """Move ``user:password@`` out of the endpoint into ``endpoint_credentials``.

        Done once, where the endpoint is read, so that no copy of it (``raw.waves``,
        ``raw.deployments``, ``raw.runs.config_json``, error lines, httpx's log of each
        request) can carry them; the subclasses define ``endpoint``.
        """
        url = getattr(self, "endpoint", None)
        if url is None or (url.username is None and url.password is None):
            return self
        if self.endpoint_credentials is not None:
            raise ValueError("give the endpoint's credentials once: in the URL or on their own")
        bare = HttpUrl(url_without_credentials(str(url)))
        user, password = unquote(url.username or ""), unquote(url.password or "")
        object.__setattr__(self, "endpoint", bare)
        object.__setattr__(self, "endpoint_credentials", SecretStr(f"{user}:{password}"))
        return self

    @field_validator("metrics_url")
    @classmethod
    def _no_metrics_credentials(cls, v: HttpUrl | None) -> HttpUrl | None:
        if v is not None and (v.username is not None or v.password is not None):
            raise ValueError(
                "no credentials in metrics_url: the scrape sends the deployment's own "
                "credentials and headers"
            )
        return v

    def basic_auth_header(self) -> str | None:
        """The ``Authorization`` value the endpoint's URL credentials make (httpx's way)."""
        if self.endpoint_credentials is None:
            return None
        raw = self.endpoint_credentials.get_secret_value().encode("utf-8")
        return "Basic " + base64.b64encode(raw).decode("ascii")


class Deployment(DeploymentBase):
    """A deployment with its endpoint known: what a sweep measures."""

    endpoint: HttpUrl = Field(description="OpenAI-compatible base URL, e.g. http://host:8000/v1")

    def api_url(self, path: str) -> str:
        """``path`` under the endpoint, its query string kept (Azure's ``?api-version=``
        belongs on every request, not inside the path)."""
        parts = urlsplit(str(self.endpoint))
        return urlunsplit(
            parts._replace(path=parts.path.rstrip("/") + "/" + path.lstrip("/"), fragment="")
        )

    def server_url(self, path: str) -> str:
        """``path`` at the server's root (``/tokenize``, ``/metrics``): the endpoint without
        its ``/v1``, query string kept."""
        parts = urlsplit(str(self.endpoint))
        base = parts.path.rstrip("/").removesuffix("/v1")
        return urlunsplit(parts._replace(path=base + "/" + path.lstrip("/"), fragment=""))

    @property
    def chat_url(self) -> str:
        return self.api_url("chat/completions")

    @property
    def models_url(self) -> str:
        return self.api_url("models")


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
    min_trial_tokens: int = Field(32, ge=2, le=MAX_TOKENS)
    trial_tokens: int | None = Field(None, ge=2, le=MAX_TOKENS)
    # a warm-up only settles the server's batch shape, so it is short
    warmup_tokens: int = Field(32, ge=2, le=MAX_TOKENS)
    # the sustain wave's length as a multiple of each stream's full output length: the default
    # holds the answer at the length users ask for (4x a trial); 0: no sustain wave
    sustain_factor: float = Field(1.0, ge=0, le=20)
    # a failed sustain wave moves the answer down one level and sustains again, this often
    sustain_retries: int = Field(2, ge=0, le=8)
    # Bisection trusts a monotone curve; padded batches can dip below it. After bisection the
    # search tests levels below its answer that it skipped: the first padded level after each
    # declared batch bucket (a deployment's ``batch_buckets``), else this many levels, each the
    # middle of the widest untested gap below the answer (0: no check). A level that fails
    # makes the curve non-monotone; the capacity is then the largest level every tested level
    # up to which passes, and the report flags it.
    dip_check_levels: int = Field(2, ge=0, le=16)


def search_plan(
    search: bool,
    max_level: int | None = None,
    trials_max: int | None = None,
    confidence: float | None = None,
    sustain_factor: float | None = None,
    trial_tokens: int | None = None,
) -> SearchPlan | None:
    """The command line's search options as a plan (``None``: a grid). An option given
    without ``--search`` would silently do nothing, so it is refused, named as typed."""
    options = {
        "max_level": max_level,
        "trials_max": trials_max,
        "confidence": confidence,
        "sustain_factor": sustain_factor,
        "trial_tokens": trial_tokens,
    }
    given = {k: v for k, v in options.items() if v is not None}
    if not search:
        if given:
            names = ", ".join("--" + k.replace("_", "-") for k in given)
            verb = "applies" if len(given) == 1 else "apply"
            raise OptionError(f"{names} {verb} only with --search")
        return None
    return SearchPlan(**given)


class SweepPlan(Strict):
    levels: tuple[int, ...] = (1, 2, 4, 8, 16)
    trials: int = Field(3, ge=1, le=5)
    warmup: bool = True
    max_tokens: int | None = Field(
        None, ge=2, le=MAX_TOKENS, description="override the workload's length"
    )
    # A wave the *client* spoiled (its own stalls or a ragged release) says nothing about the
    # server, so it is measured again, at most this many extra times; the spoiled wave stays in
    # raw, marked superseded. Server-side failures are findings and are never re-run.
    max_remeasures: int = Field(2, ge=0, le=5)
    # The tolerances dbt judges with (vars timing_error_tolerance, start_skew_tolerance; a unit
    # test keeps these defaults equal): relative rate error from loop stalls, and start skew as
    # a share of the median stream's decode span. A night (runner.run_sweeps) always fills them
    # from dbt's vars as this environment sets them (SPARKCAP_DBT_VARS); a value given here
    # reaches only a sweep run without the runner.
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
    # the agent workload's sessions (its levels count sessions); ignored by code and prose
    sessions: SessionShape = Field(default_factory=lambda: SessionShape())

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


def probe_flags(
    kind: str,
    *,
    prompt_tokens: int,
    background_streams: int | None,
    background_tokens: int | None,
    probe_interval_s: float,
    warm_requests: int,
    concurrency: int,
    lengths: str,
    workload: str,
    code_share: float,
    trials: int,
    max_tokens: int | None,
    start_tokens: int = 1024,
    context_tokens: int | None = None,
) -> ProbeOptions:
    """``sparkcap probe``'s flags, shared by the four probes, as probe ``kind``'s own options
    (one flag, one meaning: ``--prompt-tokens`` is the long prompt of prefill-interference and
    the document of prompt-cache); validated like a fleet file's probe."""
    by_kind: dict[str, dict[str, Any]] = {
        "prefill-interference": {
            "background_streams": background_streams,
            "background_tokens": background_tokens,
            "long_prompt_tokens": prompt_tokens,
            "probe_interval_s": probe_interval_s,
        },
        "prompt-cache": {"document_tokens": prompt_tokens, "warm_requests": warm_requests},
        "output-length": {
            "concurrency": concurrency,
            "lengths": [x for x in lengths.split(",") if x.strip()],
            "workload": workload,
            "trials": trials,
        },
        "mixed": {
            "concurrency": concurrency,
            "code_share": code_share,
            "trials": trials,
            "max_tokens": max_tokens,
        },
        "gap-attribution": {
            "concurrency": concurrency,
            "trials": trials,
            "max_tokens": max_tokens,
        },
        "context-ladder": {
            "start_tokens": start_tokens,
            "context_tokens": context_tokens,
            "background_streams": background_streams,
            "background_tokens": background_tokens,
            "answer_tokens": max_tokens,
        },
    }
    # a flag left unset (None) is the probe's own default, which differs between probes
    return probe_options(kind, **{k: v for k, v in by_kind[kind].items() if v is not None})


def redacted_config(obj: BaseModel) -> dict[str, Any]:
    """A JSON-able dump for ``raw.runs.config_json``: names of key variables, never values."""
    return obj.model_dump(mode="json")


def planned_wave_count(plan: SweepPlan) -> int:
    """Waves a plan runs: exact for a grid; for a search an estimate (doubling to the top,
    three bisection steps, warm-up + two trials a level, one sustain wave) for progress bars."""
    if plan.search is None:
        return len(plan.levels) * (plan.trials + (1 if plan.warmup else 0))
    doubling = max(1, plan.search.max_level).bit_length() + 1
    per_level = 2 + (1 if plan.warmup else 0)
    return (doubling + 3) * per_level + (1 if plan.search.sustain_factor > 0 else 0)
