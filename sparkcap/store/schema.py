"""The raw schema, defined once.

Each raw table is one ``pa.schema`` here. The DuckDB DDL (``SCHEMA_SQL``), the Arrow tables
staging writes (``raw_table``), the upgrade of an older warehouse (columns are only ever added)
and the checks that the generated docs page (docs/reference/raw-schema.md) and dbt's
``_sources.yml`` name the same tables and columns (``tests/unit/test_schema.py``) all come from
these definitions. A column's comment lives in its field metadata (``doc``) and is written into
the DDL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

STR = pa.string()
I32 = pa.int32()
I64 = pa.int64()
F64 = pa.float64()
BOOL = pa.bool_()
TS = pa.timestamp("us", tz="UTC")
MAP = pa.map_(pa.string(), pa.string())

_DUCKDB_TYPES: dict[pa.DataType, str] = {
    STR: "varchar",
    I32: "integer",
    I64: "bigint",
    F64: "double",
    BOOL: "boolean",
    TS: "timestamptz",
    MAP: "map(varchar, varchar)",
}


def _c(
    name: str,
    typ: pa.DataType,
    *,
    null: bool = True,
    primary_key: bool = False,
    default: str | None = None,
    doc: str | None = None,
    json: bool = False,
) -> pa.Field:
    """One column; ``json=True`` stores text as DuckDB ``json``."""
    meta = {"doc": doc or ""}
    if json:
        meta["duckdb_type"] = "json"
    if primary_key:
        meta["primary_key"] = "true"
    if default is not None:
        meta["default"] = default
    return pa.field(name, typ, nullable=null, metadata=meta)


def _table(doc: str | None, *fields: pa.Field) -> pa.Schema:
    return pa.schema(fields, metadata={"doc": doc or ""})


RAW_TABLES: dict[str, pa.Schema] = {
    "runs": _table(
        None,
        _c("run_id", STR, null=False, primary_key=True),
        _c("started_at", TS, null=False),
        _c("finished_at", TS),
        _c("sparkcap_version", STR, null=False),
        _c("config_json", STR, json=True),
        _c("status", STR, default="running", doc="running | complete | incomplete"),
        _c("status_reason", STR),
    ),
    "waves": _table(
        None,
        _c("wave_id", STR, null=False, doc="unique (staging replaces by wave)"),
        _c("run_id", STR, null=False),
        _c("deployment", STR, null=False),
        _c("model", STR, null=False),
        _c("endpoint", STR, null=False),
        _c("workload", STR, null=False),
        _c("concurrency", I32, null=False),
        _c("trial", I32, null=False, doc="0 = warm-up, never counted"),
        _c("started_at", TS, null=False, doc="wall-clock anchor of the wave"),
        _c("start_skew_ms", F64),
        _c("loop_lag_p99_ms", F64),
        _c("client_cpu_pct", F64),
        _c("client_saturated", BOOL, doc="legacy (before 0.2): capture-time verdict; now NULL"),
        _c("saturation_reasons", STR, doc="legacy, likewise; the verdict lives in dbt"),
        _c("duration_s", F64),
        _c("effective_concurrency", F64, doc="legacy (before 0.4): now computed by dbt; NULL"),
        _c("peak_concurrency", I32, doc="legacy, likewise (int_trials)"),
        _c("queued", BOOL, doc="legacy, likewise: the verdict lives in dbt"),
        _c("queued_reason", STR, doc="legacy, likewise"),
        _c("n_requests", I32, null=False),
        _c("staged_at", TS, doc="when this wave was (re)staged"),
        _c("probe", STR, doc="NULL for sweeps; else the probe's name"),
        _c("loop_lag_max_ms", F64),
        _c("timing_error_bound", F64, doc="largest rate error loop stalls can explain (share)"),
        _c("attempt", I32, doc="1, or n > 1 when it re-measures a spoiled wave"),
        _c("superseded_reason", STR, doc="set when a later attempt replaced this wave"),
        _c("metrics_error", STR, doc="why a /metrics scrape around the wave failed"),
        _c("client_process_count", I32, doc="load-generating processes that ran the wave"),
        _c("method", STR, doc="grid | search (NULL before 0.5: grid)"),
        _c("search_step", I32, doc="a search's level (or sustain wave) order, from 1"),
        _c(
            "length_factor",
            F64,
            doc="stream length as a share of the full output length (NULL in older warehouses: 1)",
        ),
        _c(
            "cache_reset",
            STR,
            doc="prefix cache before the wave: reset | unsupported | failed: ... (NULL: not asked)",
        ),
    ),
    "search_levels": _table(
        "What a live search decided after a level's last wave, and why (live figures; the "
        "verdict of record is dbt's fct_search_path)",
        _c("wave_id", STR, null=False, doc="the wave after which the decision was made"),
        _c("run_id", STR, null=False),
        _c("deployment", STR, null=False),
        _c("workload", STR, null=False),
        _c("kind", STR, null=False, doc="level | sustain"),
        _c("search_step", I32, null=False),
        _c("concurrency", I32, null=False),
        _c("n_trials", I32, null=False, doc="counted trials run at the level"),
        _c("n_valid_trials", I32, null=False, doc="of them, those the live figures used"),
        _c("confidence", F64, null=False),
        _c("trials_max", I32, null=False),
        _c("live_median_tok_s", F64),
        _c("live_ci_low_tok_s", F64),
        _c("live_ci_high_tok_s", F64),
        _c("live_verdict", STR, null=False, doc="pass | fail | straddles"),
        _c("stop_reason", STR, null=False),
        _c("next_action", STR, null=False),
    ),
    "client_processes": _table(
        None,
        _c("wave_id", STR, null=False),
        _c(
            "process_index", I32, null=False, doc="stream i ran in process i % client_process_count"
        ),
        _c("pid", I32),
        _c("n_streams", I32, null=False),
        _c("released_ns", I64, doc="ns from the wave's anchor, like raw.requests"),
        _c("ended_ns", I64),
        _c("loop_lag_p99_ms", F64),
        _c("loop_lag_max_ms", F64),
        _c("cpu_pct", F64, doc="of one core"),
        _c("timing_error_bound", F64, doc="over this process's streams (share)"),
    ),
    "requests": _table(
        None,
        _c("request_id", STR, null=False, doc="unique (staging replaces by wave)"),
        _c("wave_id", STR, null=False),
        _c("run_id", STR, null=False),
        _c("stream_index", I32, null=False),
        _c("prompt_id", STR, null=False),
        _c("requested_tokens", I32, null=False),
        _c("required_tokens", I32),
        _c("temperature", F64, null=False),
        _c("sent_ns", I64, doc="ns offsets from the wave's monotonic anchor"),
        _c("first_token_ns", I64),
        _c("last_token_ns", I64),
        _c("end_ns", I64),
        _c("headers_ns", I64),
        _c("completion_tokens", I32, doc="NULL when the server gave no count"),
        _c("prompt_tokens", I32),
        _c("cached_prompt_tokens", I32),
        _c("count_source", STR, null=False, doc="usage | continuous_usage | none | invalid_usage"),
        _c("finish_reason", STR),
        _c("status", STR, null=False, doc="ok | short | truncated | server_error | ..."),
        _c("http_status", I32),
        _c("error", STR),
        _c("retry_after", STR),
        _c("saw_done", BOOL, null=False),
        _c("n_chunks", I32, null=False),
        _c("role", STR, doc="probes: what the request was for"),
        _c("first_token_exact", BOOL, doc="stamp = kernel arrival of that event alone (0.3+)"),
        _c("last_token_exact", BOOL),
        _c("full_tokens", I32, doc="the full output length a search's stream stands in for"),
        _c("session_id", STR, doc="agent workload: the session that sent this turn"),
        _c("turn_index", I32, doc="agent workload: the session's turn, from 0"),
        _c(
            "scheduled_ns",
            I64,
            doc="open-loop replay: the request's scheduled start, ns from the wave's anchor "
            "(sent_ns later than it is the client's lateness)",
        ),
        _c(
            "timing_error_bound",
            F64,
            doc="open-loop replay: the most the client's loop stalls can have moved this "
            "stream's rate, a share (NULL: not computed; a sweep's is on raw.waves)",
        ),
        _c(
            "first_answer_ns",
            I64,
            doc="the first answer token (content or a tool call), ns from the anchor; "
            "first_token_ns is the first on any channel, reasoning included (NULL: no answer)",
        ),
        _c("reasoning_chars", I64, doc="reasoning text streamed (reasoning fields), characters"),
        _c(
            "reasoning_tokens",
            I32,
            doc="usage.completion_tokens_details.reasoning_tokens (NULL: not reported)",
        ),
        _c("think_tag", BOOL, doc="the answer's text held a <think> tag"),
    ),
    "chunks": _table(
        None,
        _c("request_id", STR, null=False),
        _c("seq", I32, null=False),
        _c("t_ns", I64, null=False),
        _c("n_tokens", I32, doc="NULL unless the server gave per-chunk counts"),
        _c("n_chars", I32, null=False),
    ),
    "deployments": _table(
        None,
        _c("run_id", STR, null=False),
        _c("deployment", STR, null=False),
        _c("model", STR, null=False),
        _c("endpoint", STR, null=False),
        _c("nodes", I32, null=False),
        _c("hardware", STR),
        _c("replicas", I32, null=False),
        _c("parallel_slots", I32),
        _c("reports_usage", BOOL, null=False),
        _c("extra_body_json", STR, json=True),
        _c("timeout_total_s", F64),
        _c("reasoning", STR, doc="off | on: whether its streams are meant to reason"),
    ),
    "server_metrics": _table(
        None,
        _c("wave_id", STR, null=False),
        _c(
            "phase",
            STR,
            null=False,
            doc="before | during | after (during: sampled while the wave runs)",
        ),
        _c("name", STR, null=False),
        _c("labels", STR, null=False, doc="sorted JSON of the labels ('' when none), for reading"),
        _c("value", F64),
        _c("label_map", MAP, doc="the labels, structured: filter with element_at/map_values"),
    ),
    "replay_offers": _table(
        "What an open-loop replay (`sparkcap replay`, a wave with probe `replay`) was asked "
        "to send: seeded Poisson arrivals at these rates for this long. One row per replay "
        "wave; `marts.fct_replay` sets what it observed against it.",
        _c("wave_id", STR, null=False),
        _c("rate_factor", F64, null=False, doc="times the plan's arrival rates (1.0: the plan)"),
        _c("duration_s", F64, null=False, doc="arrivals were scheduled over this long"),
        _c("seed", I64, null=False, doc="the schedule's seed: same seed, same instants"),
        _c("planned_streams", F64, null=False, doc="the plan's concurrency for the deployment"),
        _c("code_per_s", F64, null=False, doc="the plan's code arrivals a second (× factor)"),
        _c("prose_per_s", F64, null=False, doc="the plan's prose arrivals a second (× factor)"),
        _c("long_per_min", F64, null=False, doc="long prompts a minute (× factor)"),
        _c("long_prompt_tokens", I32, null=False),
        _c("client_stall_s", F64, null=False, doc="a deliberate client stall (0: none)"),
        _c("client_stall_at_s", F64, null=False),
        _c(
            "max_below_threshold_share",
            F64,
            doc="the plan's prefill budget: decode below the threshold beside long prefills "
            "at most this share of the time (NULL: none given, none checked)",
        ),
        _c(
            "replay_id",
            STR,
            doc="the one `sparkcap replay` across the fleet this wave was part of: its "
            "deployments are judged together (NULL: a replay alone, judged alone)",
        ),
        _c(
            "plan_kind",
            STR,
            doc="the plan its rates came from: rate (open-loop capacity, fct_plan_rates) or "
            "burst (the burst plan's streams by Little's law); NULL: stored before kinds",
        ),
        _c(
            "search_id",
            STR,
            doc="the `sparkcap replay --search` this replay was a step of (NULL: not a search); "
            "its steps bisect each deployment's rate factor (marts.fct_replay_search)",
        ),
        _c(
            "not_replayed_reason",
            STR,
            doc="why this planned deployment's replay never ran (its server down, its "
            "preflight refused); its wave has no requests (NULL: it ran)",
        ),
    ),
    "power_samples": _table(
        "A deployment's power source (its fleet file's `power:`: a DCGM exporter, a node "
        "exporter, NVML) read while each wave ran: a round just before the streams are "
        "released, one every `interval_s`, one after the last ends. A reading the source "
        "could not give is a row with status `unavailable` and its reason, never a 0; a "
        "deployment without a power source has no rows. `intermediate.int_wave_energy` "
        "integrates them.",
        _c("wave_id", STR, null=False),
        _c("seq", I32, null=False, doc="the sampling round within the wave (0: before it)"),
        _c("t_ns", I64, null=False, doc="ns from the wave's anchor, like raw.chunks.t_ns"),
        _c("source", STR, null=False, doc="dcgm | node-exporter | nvml"),
        _c("sensor", STR, doc="gpu=0, rapl=package:0, hwmon=CHIP:SENSOR; NULL: the round failed"),
        _c("metric", STR, doc="the series or NVML call read"),
        _c("quantity", STR, doc="power_w (a draw, W) | energy_j (a counter, J)"),
        _c("value", F64, doc="W or J; NULL when unavailable"),
        _c("status", STR, null=False, doc="ok | unavailable"),
        _c("reason", STR, doc="why the reading is unavailable"),
        _c(
            "read_rtt_ns",
            I64,
            doc="the round trip of the read that gave it, ns: the source read its sensor "
            "somewhere inside it, so t_ns is known to within half of it (NULL where not kept)",
        ),
    ),
    "dq_results": _table(
        None,
        _c("run_id", STR, null=False),
        _c("wave_id", STR, doc="NULL: the expectation's overall result"),
        _c("deployment", STR),
        _c("workload", STR),
        _c("concurrency", I32),
        _c("trial", I32),
        _c("suite", STR, null=False),
        _c("expectation", STR, null=False, doc="sparkcap's id, e.g. code_output_length_exact"),
        _c("expectation_type", STR, null=False),
        _c("blocking", BOOL, null=False),
        _c("success", BOOL, null=False),
        _c("observed_value", STR),
        _c("element_count", I64),
        _c("unexpected_count", I64),
        _c("sample_ids", STR, doc="up to 10 offending request / wave ids"),
        _c("validated_at", TS, null=False),
    ),
    "step_outcomes": _table(
        None,
        _c("run_id", STR, null=False),
        _c("deployment", STR, doc="NULL: a step of the whole night"),
        _c("step", STR, null=False, doc="preflight | sweep | probe:<name> | link-check"),
        _c("status", STR, null=False, doc="ok | failed"),
        _c("reason", STR),
        _c("recorded_at", TS, null=False),
    ),
    "link_tests": _table(
        None,
        _c("run_id", STR, null=False),
        _c("deployment", STR, null=False),
        _c("link", STR, null=False),
        _c("node_a", STR),
        _c("node_b", STR),
        _c("nominal_gbps", F64),
        _c("achieved_gbps", F64, doc="NULL when the command failed or printed nothing usable"),
        _c("share", F64, doc="not judged here since 0.7: see fct_link_health"),
        _c("healthy", BOOL, doc="not judged here since 0.7: see fct_link_health"),
        _c("min_share", F64, doc="the fleet's link_min_share, the bar fct_link_health applies"),
        _c("tool", STR, doc="iperf3-json | ib-bw | plain"),
        _c("error", STR),
        _c("measured_at", TS, null=False),
    ),
    "deployment_facts": _table(
        "One row per fact of a run's deployment per source: what the fleet file declares "
        "and what the server says (for the bottleneck diagnosis); dbt's int_deployment_facts "
        "picks one value per fact, a declared one first",
        _c("run_id", STR, null=False),
        _c("deployment", STR, null=False),
        _c(
            "fact",
            STR,
            null=False,
            doc="engine | memory_bandwidth_gb_s | memory_bandwidth_basis (nominal or "
            "measured) | nodes_per_replica | weight_bytes | "
            "moe_experts | moe_experts_per_token | moe_expert_bytes | moe_shared_bytes | "
            "kv_bytes_per_token | context_tokens | server_slots | engine_version | model_id | "
            "model_root | server_started_at (seconds since the epoch) | settings_hash | "
            "client_host | discovery (a failure)",
        ),
        _c("value", F64, doc="NULL for a text fact (text_value) and for a discovery row"),
        _c(
            "text_value",
            STR,
            doc="a text fact's value: engine, engine_version, model_id, model_root, "
            "settings_hash, client_host",
        ),
        _c(
            "source",
            STR,
            null=False,
            doc="declared | gguf | llama-props | llama-models-meta | vllm-models | "
            "models-owned-by | vllm-version | sglang-server-info | models-listing | metrics | "
            "sparkcap (what sparkcap knows itself)",
        ),
        _c("detail", STR, doc="the key or field read, or why discovery failed"),
        _c("recorded_at", TS, null=False),
    ),
}


def duckdb_type(field: pa.Field) -> str:
    meta = field.metadata or {}
    if b"duckdb_type" in meta:
        return str(meta[b"duckdb_type"].decode())
    return _DUCKDB_TYPES[field.type]


def _column_ddl(field: pa.Field, width: int) -> str:
    meta = field.metadata or {}
    parts = [f"{field.name:<{width}}{duckdb_type(field)}"]
    if meta.get(b"primary_key") == b"true":
        parts.append("primary key")
    elif not field.nullable:
        parts.append("not null")
    if b"default" in meta:
        parts.append(f"default '{meta[b'default'].decode()}'")
    return " ".join(parts)


def create_table_sql(name: str) -> str:
    schema = RAW_TABLES[name]
    lines = []
    doc = (schema.metadata or {}).get(b"doc", b"").decode()
    if doc:
        lines.append(f"-- {doc}")
    cols = []
    width = max(len(f.name) for f in schema) + 2  # aligned, as a person would write it
    for i, field in enumerate(schema):
        comma = "," if i < len(schema) - 1 else ""
        comment = (field.metadata or {}).get(b"doc", b"").decode()
        cols.append(
            f"    {_column_ddl(field, width)}{comma}" + (f"  -- {comment}" if comment else "")
        )
    lines.append(f"create table if not exists raw.{name} (")
    lines += cols
    lines.append(");")
    return "\n".join(lines)


SCHEMA_SQL = "create schema if not exists raw;\n\n" + "\n\n".join(
    create_table_sql(name) for name in RAW_TABLES
)


def columns(name: str) -> list[tuple[str, str]]:
    """(column, DuckDB type) of a raw table, in order."""
    return [(f.name, duckdb_type(f)) for f in RAW_TABLES[name]]


def raw_table(name: str, data: Mapping[str, Sequence[Any] | pa.Array]) -> pa.Table:
    """An Arrow table for ``raw.<name>`` with the schema's types; columns it lacks stay NULL
    when inserted (legacy columns, or columns a caller does not know)."""
    schema = RAW_TABLES[name]
    unknown = set(data) - set(schema.names)
    if unknown:
        raise KeyError(f"raw.{name} has no column(s) {', '.join(sorted(unknown))}")
    arrays: list[pa.Array] = []
    fields: list[pa.Field] = []
    for field in schema:
        if field.name not in data:
            continue
        values = data[field.name]
        if isinstance(values, pa.DictionaryArray):
            if values.type.value_type != field.type:
                raise TypeError(f"raw.{name}.{field.name}: {values.type} is not {field.type}")
            array: pa.Array = values
        elif isinstance(values, pa.Array):
            array = values if values.type == field.type else values.cast(field.type)
        else:
            array = pa.array(values, type=field.type)
        arrays.append(array)
        fields.append(pa.field(field.name, array.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))
