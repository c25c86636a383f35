"""What a deployment's server says about its decode steps, where the fleet file is silent.

The bottleneck diagnosis sets each measured level beside the bound a node's
memory bandwidth puts on it, and that bound needs the bytes a step reads. A fleet file may
declare them (``Deployment.facts``); otherwise the server often says: llama-server's
``/v1/models`` (``owned_by``, ``meta.size``, ``meta.n_ctx_train``) and ``/props``
(``default_generation_settings.n_ctx``, ``total_slots``), vLLM's ``/v1/models``
(``max_model_len``), and the served GGUF's metadata. Each figure becomes one
:class:`FactRow` naming its source; dbt (``int_deployment_facts``) picks one per fact, a
declared value first.

Everything a server answers is untrusted: each value is checked with the bounds of
``config.facts`` before it is kept, and one that fails (``true``, 2**70, NaN, a negative)
becomes a ``discovery`` row saying which value was refused, as does an endpoint that fails.
Discovery never raises and never waits longer than ``DISCOVERY_TIMEOUT_S`` per endpoint
(or file); a 404 only means the server has no such endpoint, and records nothing. The
listing a sweep's preflight read is reused, and ``/props`` is asked only of a server that
says it is llama-server, so a server sees at most one request it would not have seen before.

A night also records what can change a number from one night to the next without the fleet
file changing (the change detection: dbt's ``int_run_context``): the engine's version
(vLLM ``/version``, SGLang ``/get_server_info``, llama-server's ``/props`` ``build_info``, a
``*build_info*`` metric's ``version`` label), the model the server says it serves (the
listing's ``id``, vLLM's ``root``: the weights behind a served name), and when the server
process started (``process_start_time_seconds``: a restart resets caches and warm-up). Those
are asked for with ``context=True`` only: ``/version`` or ``/get_server_info`` of a server that
says it is vLLM or SGLang, and one ``/metrics`` scrape, which the sweep scrapes before every
wave anyway. What sparkcap knows itself (a hash of the deployment's measured settings, the
client host) is recorded beside the declared facts, under the source ``sparkcap``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import EllipsisType
from typing import Annotated, Any, get_args
from urllib.parse import urlsplit

import httpx
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from sparkcap.config.deployment import Deployment, DeploymentBase, url_without_credentials
from sparkcap.config.facts import EngineName, ModelFacts, MoEFacts
from sparkcap.errors import GGUFError, MissingSecret
from sparkcap.loadgen.connections import FetchFailed, fetch_bounded, make_client
from sparkcap.loadgen.gguf import GGUFArray, GGUFMetadata, Value, read_metadata
from sparkcap.loadgen.metrics import (
    MAX_METRICS_BYTES,
    MetricsParseError,
    metrics_url,
    parse_prometheus,
)
from sparkcap.loadgen.sweep import request_headers

# one endpoint's answer (connect, headers, body) or one GGUF read may take this long; in a
# sweep the listing is the preflight's, so only /props and the GGUF are waited for
DISCOVERY_TIMEOUT_S = 5.0
MAX_BODY_BYTES = 1 << 20
MAX_DETAIL_CHARS = 300

DECLARED = "declared"
SOURCES = ("declared", "gguf", "llama-props", "llama-models-meta", "vllm-models", "models-owned-by")
DISCOVERY = "discovery"  # the fact of a row that says why something was not discovered
# the source a failed /v1/models is recorded under: the one part every engine's listing has
LISTING = "models-owned-by"
FACTS = (
    "engine",
    "memory_bandwidth_gb_s",
    "memory_bandwidth_basis",
    "nodes_per_replica",
    "weight_bytes",
    "moe_experts",
    "moe_experts_per_token",
    "moe_expert_bytes",
    "moe_shared_bytes",
    "kv_bytes_per_token",
    "context_tokens",
    "server_slots",
)
# what can change a number between nights (int_run_context), all text but server_started_at
CONTEXT_FACTS = (
    "engine_version",
    "model_id",
    "model_root",
    "server_started_at",
    "settings_hash",
    "client_host",
)
# what sparkcap itself knows when it records a run: written with the declared facts
SPARKCAP = "sparkcap"
CONTEXT_SOURCES = ("vllm-version", "sglang-server-info", "models-listing", "metrics", SPARKCAP)
# a version as engines write them: 0.11.2, 0.6.4.post1, 0.11.1rc2.dev12+g1a2b3c.cu128, b6000-1a2b3c
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+\-]{0,79}")
MAX_MODEL_ID_CHARS = 256
# a process start before 2000 or more than a day ahead of this clock is no start time
EARLIEST_START_S = 946_684_800.0
START_AHEAD_S = 86_400.0
# the deployment settings a measurement depends on, hashed into settings_hash; never its
# headers, key variables or credentials (the endpoint is hashed without its user:password)
SETTINGS_HASHED = (
    "model",
    "endpoint",
    "nodes",
    "replicas",
    "parallel_slots",
    "batch_buckets",
    "extra_body",
    "continuous_usage",
    "reports_usage",
    "facts",
)
SETTINGS_HASH_HEX_DIGITS = 16
# the engines whose /v1/models says who they are; TGI and others put a model id there
ENGINES_BY_OWNER = ("llamacpp", "vllm", "sglang", "tgi", "trtllm")
# f16 K and V: llama-server's default --cache-type-k/-v
KV_CACHE_ELEMENT_BYTES = 2
_ARCH = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


@dataclass(frozen=True)
class FactRow:
    """One fact of one deployment from one source (a ``raw.deployment_facts`` row without
    its run); ``value`` is None in a ``discovery`` row, whose ``detail`` says why."""

    fact: str
    value: float | None
    source: str
    detail: str | None = None
    text_value: str | None = None


def _strict(annotation: Any, *constraints: Any) -> TypeAdapter[Any]:
    return TypeAdapter(Annotated[(annotation, *constraints)], config=ConfigDict(strict=True))


def _field(model: type[ModelFacts | MoEFacts | DeploymentBase], name: str, kind: type) -> Any:
    return _strict(kind, *model.model_fields[name].metadata)


# the bounds a declared fact must meet, taken from the declarations themselves
_CHECKS: dict[str, TypeAdapter[Any]] = {
    "weight_bytes": _field(ModelFacts, "weight_bytes", float),
    "kv_bytes_per_token": _field(ModelFacts, "kv_bytes_per_token", float),
    "context_tokens": _field(ModelFacts, "context_tokens", int),
    "layers": _field(ModelFacts, "layers", int),
    "kv_heads": _field(ModelFacts, "kv_heads", int),
    "head_dim": _field(ModelFacts, "head_dim", int),
    "moe_experts": _field(MoEFacts, "experts", int),
    "moe_experts_per_token": _field(MoEFacts, "experts_per_token", int),
    # parallel_slots has no upper bound; a server claiming more slots than this is wrong
    "server_slots": _strict(int, Field(ge=1, le=4096)),
}
_ENGINES = frozenset(get_args(EngineName))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _row_problem(source: str, detail: str) -> FactRow:
    return FactRow(DISCOVERY, None, source, detail[:MAX_DETAIL_CHARS])


def checked(fact: str, value: Any, source: str, detail: str) -> FactRow:
    """The fact's row when ``value`` passes the declaration's checks, else a ``discovery``
    row naming the value refused (shown cut short: it is the server's text)."""
    try:
        number = _CHECKS[fact].validate_python(value)
    except ValidationError as exc:
        why = exc.errors()[0]["msg"]
        return _row_problem(source, f"refused {fact} {_shown(value)} from {detail}: {why}")
    if not math.isfinite(number):  # an int field is finite already; a float one is bounded
        return _row_problem(source, f"refused {fact} {_shown(value)} from {detail}: not finite")
    return FactRow(fact, float(number), source, detail[:MAX_DETAIL_CHARS])


def checked_text(fact: str, value: Any, source: str, detail: str) -> FactRow:
    """The text fact's row when ``value`` reads as one (a version's characters; a model id
    printable, at most ``MAX_MODEL_ID_CHARS``, naming no credentials), else a ``discovery``
    row. A model id that names ``user:password@`` is refused without being shown."""
    if fact == "engine_version":
        fits = isinstance(value, str) and _VERSION.fullmatch(value) is not None
        why = "not a version"
    else:
        fits = isinstance(value, str) and 0 < len(value) <= MAX_MODEL_ID_CHARS
        fits = fits and value.isprintable()
        why = f"not a printable name of at most {MAX_MODEL_ID_CHARS} characters"
        if fits and re.search(r"://[^/@]*@", value):
            return _row_problem(source, f"refused {fact} from {detail}: it names credentials")
    if not fits:
        return _row_problem(source, f"refused {fact} {_shown(value)} from {detail}: {why}")
    return FactRow(fact, None, source, detail[:MAX_DETAIL_CHARS], text_value=value)


def _checked_start(value: float, detail: str) -> FactRow:
    latest = time.time() + START_AHEAD_S
    if not math.isfinite(value) or not EARLIEST_START_S <= value <= latest:
        return _row_problem(
            "metrics", f"refused server_started_at {_shown(value)} from {detail}: not a start time"
        )
    return FactRow("server_started_at", value, "metrics", detail[:MAX_DETAIL_CHARS])


def settings_hash(dep: Deployment) -> str:
    """A digest of the settings a measurement depends on (``SETTINGS_HASHED``): one that
    differs between two nights says the fleet file changed what was measured. Facts left at
    their defaults are not hashed, so a sparkcap that adds an optional fact changes no hash."""
    settings = {
        "model": dep.model,
        "endpoint": url_without_credentials(str(dep.endpoint)),
        "nodes": dep.nodes,
        "replicas": dep.replicas,
        "parallel_slots": dep.parallel_slots,
        "batch_buckets": list(dep.batch_buckets) if dep.batch_buckets is not None else None,
        "extra_body": dep.extra_body,
        "continuous_usage": dep.continuous_usage,
        "reports_usage": dep.reports_usage,
        "facts": dep.facts.model_dump(mode="json", exclude_defaults=True),
    }
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:SETTINGS_HASH_HEX_DIGITS]


def sparkcap_facts(dep: Deployment, client_host: str) -> list[FactRow]:
    """What sparkcap knows of a run's deployment when it records it: the hash of its
    measured settings and the host whose client measures it (a slower client host is a
    slower night as surely as a slower server)."""
    hashed = ", ".join(SETTINGS_HASHED)
    return [
        FactRow(
            "settings_hash",
            None,
            SPARKCAP,
            f"sha256 of {hashed}, first {SETTINGS_HASH_HEX_DIGITS} hex digits",
            text_value=settings_hash(dep),
        ),
        FactRow(
            "client_host",
            None,
            SPARKCAP,
            "SPARKCAP_CLIENT_HOST or the host name",
            text_value=client_host[:MAX_MODEL_ID_CHARS],
        ),
    ]


def declared_facts(dep: DeploymentBase) -> list[FactRow]:
    """The facts the fleet file (or CLI) declares, validated by ``ModelFacts`` already;
    ``server_slots`` is the declared ``parallel_slots``."""
    f = dep.facts
    rows: list[FactRow] = []
    if f.engine is not None:
        rows.append(FactRow("engine", None, DECLARED, "facts.engine", text_value=f.engine))
    if f.memory_bandwidth_basis is not None:
        rows.append(
            FactRow(
                "memory_bandwidth_basis",
                None,
                DECLARED,
                "facts.memory_bandwidth_basis",
                text_value=f.memory_bandwidth_basis,
            )
        )
    numbers: list[tuple[str, float | int | None, str]] = [
        ("memory_bandwidth_gb_s", f.memory_bandwidth_gb_s, "facts.memory_bandwidth_gb_s"),
        ("nodes_per_replica", f.nodes_per_replica, "facts.nodes_per_replica"),
        ("weight_bytes", f.weight_bytes, "facts.weight_bytes"),
        ("context_tokens", f.context_tokens, "facts.context_tokens"),
        ("server_slots", dep.parallel_slots, "parallel_slots"),
    ]
    if f.moe is not None:
        numbers += [
            ("moe_experts", f.moe.experts, "facts.moe.experts"),
            ("moe_experts_per_token", f.moe.experts_per_token, "facts.moe.experts_per_token"),
            ("moe_expert_bytes", f.moe.expert_bytes, "facts.moe.expert_bytes"),
            ("moe_shared_bytes", f.moe.shared_bytes, "facts.moe.shared_bytes"),
        ]
    kv_detail = (
        "facts.kv_bytes_per_token"
        if f.kv_bytes_per_token is not None
        else "facts: layers × kv_heads × head_dim × 2 (K and V) × kv_dtype_bytes"
    )
    numbers.append(("kv_bytes_per_token", f.kv_bytes(), kv_detail))
    rows += [FactRow(n, float(v), DECLARED, d) for n, v, d in numbers if v is not None]
    return rows


# -- the server's endpoints -------------------------------------------------------------


@dataclass(frozen=True)
class _Answer:
    body: dict[str, Any] | None = None  # None with no problem: a 404, nothing to record
    problem: str | None = None


@dataclass(frozen=True)
class _Page:
    body: bytes | None = None  # None with no problem: the server has no such endpoint
    problem: str | None = None


async def _get(
    client: httpx.AsyncClient,
    dep: Deployment,
    url: str,
    timeout_s: float,
    accept: str,
    max_bytes: int = MAX_BODY_BYTES,
    absent: tuple[int, ...] = (404,),
) -> _Page:
    path = urlsplit(url).path or "/"  # what a detail names: never a query string
    try:
        headers = {**request_headers(dep, url), "Accept": accept}
    except MissingSecret as exc:
        return _Page(problem=f"GET {path} not sent: {exc}")
    try:
        status, body = await fetch_bounded(client, url, headers, timeout_s, max_bytes)
    except FetchFailed as exc:
        return _Page(problem=f"GET {path}: {str(exc).replace(url, path)}")
    if status in absent:
        return _Page()
    if status != 200:
        return _Page(problem=f"GET {path}: HTTP {status}")
    return _Page(body)


async def _get_json(
    client: httpx.AsyncClient, dep: Deployment, url: str, timeout_s: float
) -> _Answer:
    path = urlsplit(url).path or "/"
    page = await _get(client, dep, url, timeout_s, "application/json")
    if page.body is None:
        return _Answer(problem=page.problem)
    body = page.body
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return _Answer(problem=f"GET {path}: the body is not JSON")
    if not isinstance(parsed, dict):
        return _Answer(problem=f"GET {path}: the body is not a JSON object")
    return _Answer(parsed)


def _models_rows(dep: Deployment, listing: dict[str, Any], moe_known: bool) -> list[FactRow]:
    data = listing.get("data")
    entries = [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []
    entry = next((m for m in entries if m.get("id") == dep.model), None)
    if entry is None:
        return [_row_problem(LISTING, f"no entry for model {dep.model!r} in /v1/models")]
    rows: list[FactRow] = []
    owner = entry.get("owned_by")
    if isinstance(owner, str) and owner in ENGINES_BY_OWNER:
        rows.append(FactRow("engine", None, "models-owned-by", "owned_by", text_value=owner))
    meta = entry.get("meta")
    if isinstance(meta, dict):  # llama-server's
        if "size" in meta and not moe_known:
            rows.append(
                checked(
                    "weight_bytes",
                    meta["size"],
                    "llama-models-meta",
                    "meta.size: the model's tensor bytes, all read by a dense decode step",
                )
            )
        if "n_ctx_train" in meta:
            rows.append(
                checked(
                    "context_tokens", meta["n_ctx_train"], "llama-models-meta", "meta.n_ctx_train"
                )
            )
    if "max_model_len" in entry:
        rows.append(
            checked("context_tokens", entry["max_model_len"], "vllm-models", "max_model_len")
        )
    return rows


def _props_rows(props: dict[str, Any]) -> list[FactRow]:
    rows: list[FactRow] = []
    settings = props.get("default_generation_settings")
    if isinstance(settings, dict) and "n_ctx" in settings:
        rows.append(
            checked(
                "context_tokens",
                settings["n_ctx"],
                "llama-props",
                "default_generation_settings.n_ctx (one slot's context)",
            )
        )
    if "total_slots" in props:
        rows.append(checked("server_slots", props["total_slots"], "llama-props", "total_slots"))
    return rows


# -- what can change a number between nights ---------------------------------------------


def _listing_entry(dep: Deployment, listing: dict[str, Any] | None) -> dict[str, Any] | None:
    data = listing.get("data") if listing is not None else None
    for entry in data if isinstance(data, list) else []:
        if isinstance(entry, dict) and entry.get("id") == dep.model:
            return entry
    return None


def _listing_context_rows(dep: Deployment, listing: dict[str, Any]) -> list[FactRow]:
    """The served model as the listing names it: ``id`` (the entry matching the deployment's
    model) and vLLM's ``root``, the weights behind a served name (a path or a hub id, whose
    snapshot changes when the weights do). No entry is ``_models_rows``' problem already."""
    entry = _listing_entry(dep, listing)
    if entry is None:
        return []
    rows = [checked_text("model_id", entry.get("id"), "models-listing", "id")]
    if "root" in entry and entry["root"] is not None:
        rows.append(checked_text("model_root", entry["root"], "vllm-models", "root"))
    return rows


def _engine_said(dep: Deployment, listing: dict[str, Any] | None) -> str | None:
    if dep.facts.engine is not None:
        return dep.facts.engine
    owner = (_listing_entry(dep, listing) or {}).get("owned_by")
    return owner if isinstance(owner, str) else None


def _version_rows(answer: _Answer, source: str, path: str) -> list[FactRow]:
    if answer.problem is not None:
        return [_row_problem(source, answer.problem)]
    if answer.body is None or "version" not in answer.body:
        return []
    return [checked_text("engine_version", answer.body["version"], source, f"{path} version")]


def metrics_context_rows(text: str) -> list[FactRow]:
    """From one /metrics page: when the server process started (``process_start_time_seconds``,
    the latest of several processes behind one page: any restart is a restart) and the version
    a ``*build_info*`` metric's ``version`` label gives."""
    try:
        samples = parse_prometheus(text)
    except MetricsParseError as exc:
        return [_row_problem("metrics", f"GET /metrics: {exc}")]
    rows: list[FactRow] = []
    starts = [v for name, _, v in samples if name == "process_start_time_seconds"]
    if starts:
        rows.append(_checked_start(max(starts), "process_start_time_seconds"))
    built = next(
        ((n, lb["version"]) for n, lb, _ in samples if "build_info" in n and "version" in lb),
        None,
    )
    if built is not None:
        name, version = built
        rows.append(checked_text("engine_version", version, "metrics", f"{name[:80]} version"))
    return rows


async def _metrics_rows(
    client: httpx.AsyncClient, dep: Deployment, timeout_s: float
) -> list[FactRow]:
    # 501: llama-server started without --metrics, like a 404 a server that has no page
    page = await _get(
        client, dep, metrics_url(dep), timeout_s, "text/plain", MAX_METRICS_BYTES, (404, 501)
    )
    if page.problem is not None:
        return [_row_problem("metrics", page.problem)]
    if page.body is None:
        return []
    # parsed off the loop: a large page must not stall the other deployments' discovery
    return await asyncio.to_thread(metrics_context_rows, page.body.decode("utf-8", "replace"))


async def _context_rows(
    client: httpx.AsyncClient, dep: Deployment, listing: dict[str, Any] | None, timeout_s: float
) -> list[FactRow]:
    """The engine's version from the endpoint its engine has for it (asked only of a server
    that says it is that engine) and what the /metrics page says, fetched together."""
    engine = _engine_said(dep, listing)
    asks: list[tuple[str, str]] = []
    if engine == "vllm":
        asks.append(("vllm-version", "/version"))
    elif engine == "sglang":
        asks.append(("sglang-server-info", "/get_server_info"))
    answers, metrics = await asyncio.gather(
        asyncio.gather(*(_get_json(client, dep, dep.server_url(p), timeout_s) for _, p in asks)),
        _metrics_rows(client, dep, timeout_s),
    )
    rows: list[FactRow] = []
    for (source, path), answer in zip(asks, answers, strict=True):
        rows += _version_rows(answer, source, path)
    return rows + metrics


# -- the GGUF file ----------------------------------------------------------------------


def gguf_rows(meta: GGUFMetadata) -> list[FactRow]:
    """KV bytes per token and the expert counts a GGUF's metadata gives."""
    v = meta.values
    arch = v.get("general.architecture")
    if not isinstance(arch, str) or not _ARCH.match(arch):
        return [_row_problem("gguf", f"general.architecture is {_shown(arch)}, not a name")]
    rows = _gguf_kv_rows(v, arch)
    experts = v.get(f"{arch}.expert_count")
    if experts is not None and experts != 0:  # 0 (or no key): a dense model
        key = f"{arch}.expert_count"
        row = checked("moe_experts", experts, "gguf", key)
        rows.append(row)
        used = v.get(f"{arch}.expert_used_count")
        if used is not None:
            used_key = f"{arch}.expert_used_count"
            used_row = checked("moe_experts_per_token", used, "gguf", used_key)
            if used_row.value is not None and row.value is not None and used_row.value > row.value:
                used_row = _row_problem("gguf", f"refused {used_key} {used}: more than {key}")
            rows.append(used_row)
    return rows


def _gguf_int(v: dict[str, Value], key: str, check: str) -> int | FactRow | None:
    """The key's whole number within the check's bounds, None when absent, or the refusal."""
    if key not in v:
        return None
    row = checked(check, v[key], "gguf", key)
    return int(row.value) if row.value is not None else row


def _gguf_kv_rows(v: dict[str, Value], arch: str) -> list[FactRow]:
    a = f"{arch}.attention"
    layers = _gguf_int(v, f"{arch}.block_count", "layers")
    if layers is None:
        return [_row_problem("gguf", f"no {arch}.block_count: KV bytes per token unknown")]
    if isinstance(layers, FactRow):
        return [layers]
    notes = []
    # KV heads summed over layers: a per-layer array (some hybrids hold 0 for recurrent layers)
    heads_key = f"{a}.head_count_kv" if f"{a}.head_count_kv" in v else f"{a}.head_count"
    if heads_key == f"{a}.head_count":
        notes.append(f"no {a}.head_count_kv: as many KV heads as heads")
    heads = v.get(heads_key)
    if isinstance(heads, GGUFArray):
        values = heads.values or ()
        if len(values) != layers or any(type(h) is not int or not 0 <= h <= 10_000 for h in values):
            return [
                _row_problem("gguf", f"refused {heads_key}: not {layers} per-layer head counts")
            ]
        kv_heads_total = sum(int(h) for h in values)
        heads_text = f"Σ {heads_key}"
    else:
        one = _gguf_int(v, heads_key, "kv_heads")
        if one is None:
            return [_row_problem("gguf", f"no {heads_key}: KV bytes per token unknown")]
        if isinstance(one, FactRow):
            return [one]
        kv_heads_total = layers * one
        heads_text = f"{arch}.block_count × {heads_key}"
    key_len = _gguf_int(v, f"{a}.key_length", "head_dim")
    value_len = _gguf_int(v, f"{a}.value_length", "head_dim")
    for got in (key_len, value_len):
        if isinstance(got, FactRow):
            return [got]
    if isinstance(key_len, int) and isinstance(value_len, int):
        head_text = f"({a}.key_length + {a}.value_length)"
        per_head = key_len + value_len
    else:
        width = _gguf_int(v, f"{arch}.embedding_length", "head_dim")
        n_heads = _gguf_int(v, f"{a}.head_count", "kv_heads")
        if isinstance(width, FactRow) or isinstance(n_heads, FactRow):
            return [got for got in (width, n_heads) if isinstance(got, FactRow)]
        if width is None or n_heads is None or width % n_heads:
            return [_row_problem("gguf", f"no head size in {a}.key_length or embedding_length")]
        head_text = f"2 × {arch}.embedding_length / {a}.head_count"
        per_head = 2 * (width // n_heads)
    if f"{a}.sliding_window" in v:
        notes.append("sliding-window layers counted at full context")
    detail = "; ".join(
        [
            f"{heads_text} × {head_text} × {KV_CACHE_ELEMENT_BYTES} bytes: "
            "f16 KV cache assumed (llama-server's default cache type)",
            *notes,
        ]
    )
    return [
        checked(
            "kv_bytes_per_token", kv_heads_total * per_head * KV_CACHE_ELEMENT_BYTES, "gguf", detail
        )
    ]


async def _gguf_facts(path: Path, timeout_s: float) -> list[FactRow]:
    try:
        # off the loop: a file on a slow disk must not stall the event loop's other work
        meta = await asyncio.wait_for(
            asyncio.to_thread(read_metadata, path, timeout_s), timeout_s + 1
        )
    except GGUFError as exc:
        return [_row_problem("gguf", str(exc))]
    except TimeoutError:
        return [_row_problem("gguf", f"{path}: metadata not read within {timeout_s:g} s")]
    return gguf_rows(meta)


# -- all of it --------------------------------------------------------------------------


def _says_llama_server(dep: Deployment, listing: dict[str, Any] | None) -> bool:
    """Whether to ask ``/props``: it is llama-server's, and another server's answer to it
    (an OpenAI proxy's catch-all, a test server's script) is noise at best."""
    if dep.facts.engine == "llamacpp" or dep.facts.gguf_path is not None:
        return True
    data = listing.get("data") if listing is not None else None
    for entry in data if isinstance(data, list) else []:
        if isinstance(entry, dict) and entry.get("id") == dep.model:
            return entry.get("owned_by") == "llamacpp" or isinstance(entry.get("meta"), dict)
    return False


async def discover_facts(
    dep: Deployment,
    *,
    listing: dict[str, Any] | EllipsisType | None = ...,
    client: httpx.AsyncClient | None = None,
    timeout_s: float = DISCOVERY_TIMEOUT_S,
    context: bool = False,
) -> list[FactRow]:
    """Every fact the server and the served GGUF give, and a ``discovery`` row for each
    failure; never raises for anything the server or the file does. ``listing``: the
    ``/v1/models`` answer the preflight already read (None: it had none), so the server is
    not asked twice; left out, it is fetched here. ``context``: also what can change a
    number between nights (engine version, served model, the server's start)."""
    rows: list[FactRow] = []
    if dep.facts.gguf_path is not None:
        rows += await _gguf_facts(dep.facts.gguf_path, timeout_s)
    # MoE weights are not one dense block: a file size says nothing of a step's reads
    moe_known = dep.facts.moe is not None or any(r.fact == "moe_experts" for r in rows)
    async with contextlib.AsyncExitStack() as stack:
        if client is None:
            client = await stack.enter_async_context(make_client(dep, 1))
        known: dict[str, Any] | None
        if isinstance(listing, EllipsisType):
            answer = await _get_json(client, dep, dep.models_url, timeout_s)
            if answer.problem is not None:
                rows.append(_row_problem(LISTING, answer.problem))
            known = answer.body
        else:
            known = listing
        if known is not None:
            rows += _models_rows(dep, known, moe_known)
            if context:
                rows += _listing_context_rows(dep, known)
        if _says_llama_server(dep, known):
            props = await _get_json(client, dep, dep.server_url("props"), timeout_s)
            if props.problem is not None:
                rows.append(_row_problem("llama-props", props.problem))
            if props.body is not None:
                rows += _props_rows(props.body)
                if context and "build_info" in props.body:
                    build = props.body["build_info"]
                    rows.append(checked_text("engine_version", build, "llama-props", "build_info"))
        if context:
            rows += await _context_rows(client, dep, known, timeout_s)
    return rows


async def discover_all(
    deps: Sequence[Deployment], listings: Mapping[str, dict[str, Any] | None]
) -> list[list[FactRow]]:
    """Each deployment's facts and run context, all asked at once (a sweep waits once, not
    per deployment); ``listings``: each one's ``/v1/models`` answer as its preflight read it."""
    return list(
        await asyncio.gather(
            *(discover_facts(d, listing=listings[d.name], context=True) for d in deps)
        )
    )
