"""A deployment: what an endpoint is and how to reach it, however it is given (CLI flags or a
fleet file), with the checks that keep its secrets out of every stored or printed copy.

API keys are never part of a config: a config names the environment variable that holds one.
"""

from __future__ import annotations

import base64
import itertools
import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import BaseModel, Field, HttpUrl, SecretStr, field_validator, model_validator

from sparkcap.config.base import MAX_TIMEOUT_S, EnvVarName, Strict, whole_numbers
from sparkcap.config.facts import ModelFacts
from sparkcap.config.power import PowerSource

# the JSON a request body may carry: nested this deep at most, integers of int64 (what orjson
# can write)
MAX_EXTRA_BODY_DEPTH = 32
_INT64 = (-(1 << 63), (1 << 63) - 1)
# RFC 9110 field names (tokens); values: visible ASCII, space and tab (httpx sends ASCII only,
# and a CR or LF would start another header)
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")


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
    batch_buckets: Annotated[
        tuple[int, ...] | None, whole_numbers("batch_buckets must be whole batch sizes")
    ] = Field(None, min_length=1, max_length=256)
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


def redacted_config(obj: BaseModel) -> dict[str, Any]:
    """A JSON-able dump for ``raw.runs.config_json``: names of key variables, never values."""
    return obj.model_dump(mode="json")
