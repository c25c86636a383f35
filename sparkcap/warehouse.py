"""The DuckDB warehouse: the ``raw`` schema and the staging of waves into it.

Contract for ad-hoc SQL users: the tables and columns created in ``SCHEMA_SQL`` keep their
names (columns may be added, never renamed). Staging rules:
- one transaction per wave (delete-then-insert by ``wave_id``), so a crash loses at most the
  wave in flight and re-staging never duplicates rows;
- bulk inserts from Arrow, never row by row;
- DuckDB admits one writing process: connections are opened per unit of work and closed, and a
  held lock becomes :class:`WarehouseBusy` after a bounded wait instead of a stack trace.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from sparkcap import __version__
from sparkcap.config import Deployment
from sparkcap.loadgen.records import NO_TOKENS, WaveRecord
from sparkcap.settings import get_settings

SCHEMA_SQL = """
create schema if not exists raw;

create table if not exists raw.runs (
    run_id            varchar primary key,
    started_at        timestamptz not null,
    finished_at       timestamptz,
    sparkcap_version  varchar not null,
    config_json       json,
    status            varchar default 'running',   -- running | complete | incomplete
    status_reason     varchar
);

create table if not exists raw.waves (
    wave_id                varchar not null,  -- unique (staging replaces by wave)
    run_id                 varchar not null,
    deployment             varchar not null,
    model                  varchar not null,
    endpoint               varchar not null,
    workload               varchar not null,
    concurrency            integer not null,
    trial                  integer not null,       -- 0 = warm-up, never counted
    started_at             timestamptz not null,   -- wall-clock anchor of the wave
    start_skew_ms          double,
    loop_lag_p99_ms        double,
    client_cpu_pct         double,
    client_saturated       boolean,     -- legacy (before 0.2): capture-time verdict; now NULL
    saturation_reasons     varchar,     -- legacy, likewise; the verdict lives in dbt
    duration_s             double,
    effective_concurrency  double,      -- legacy (before 0.4): now computed by dbt; NULL
    peak_concurrency       integer,     -- legacy, likewise (int_trials)
    queued                 boolean,     -- legacy, likewise: the verdict lives in dbt
    queued_reason          varchar,     -- legacy, likewise
    n_requests             integer not null,
    staged_at              timestamptz,        -- when this wave was (re)staged
    probe                  varchar,            -- NULL for sweeps; else the probe's name
    loop_lag_max_ms        double,
    timing_error_bound     double,      -- largest rate error loop stalls can explain (share)
    attempt                integer,     -- 1, or n > 1 when it re-measures a spoiled wave
    superseded_reason      varchar,     -- set when a later attempt replaced this wave
    metrics_error          varchar,     -- why a /metrics scrape around the wave failed
    client_process_count   integer      -- load-generating processes that ran the wave
);

-- one row per load-generating process per wave (loadgen/procs.py): its share of the streams,
-- its release instant and what it saw of its own event loop
create table if not exists raw.client_processes (
    wave_id             varchar not null,
    process_index       integer not null,  -- stream i ran in process i % client_process_count
    pid                 integer,
    n_streams           integer not null,
    released_ns         bigint,            -- ns from the wave's anchor, like raw.requests
    ended_ns            bigint,
    loop_lag_p99_ms     double,
    loop_lag_max_ms     double,
    cpu_pct             double,            -- of one core
    timing_error_bound  double             -- over this process's streams (share)
);

create table if not exists raw.requests (
    request_id            varchar not null,  -- unique (staging replaces by wave)
    wave_id               varchar not null,
    run_id                varchar not null,
    stream_index          integer not null,
    prompt_id             varchar not null,
    requested_tokens      integer not null,
    required_tokens       integer,
    temperature           double not null,
    sent_ns               bigint,      -- ns offsets from the wave's monotonic anchor
    first_token_ns        bigint,
    last_token_ns         bigint,
    end_ns                bigint,
    headers_ns            bigint,
    completion_tokens     integer,     -- NULL when the server gave no count
    prompt_tokens         integer,
    cached_prompt_tokens  integer,
    count_source          varchar not null,  -- usage | continuous_usage | none
    finish_reason         varchar,
    status                varchar not null,  -- ok | short | truncated | server_error | ...
    http_status           integer,
    error                 varchar,
    retry_after           varchar,
    saw_done              boolean not null,
    n_chunks              integer not null,
    role                  varchar,     -- probes: what the request was for
    first_token_exact     boolean,     -- stamp = kernel arrival of that event alone (0.3+)
    last_token_exact      boolean
);

create table if not exists raw.chunks (
    request_id  varchar not null,
    seq         integer not null,
    t_ns        bigint not null,
    n_tokens    integer,   -- NULL unless the server gave per-chunk counts
    n_chars     integer not null
);

create table if not exists raw.deployments (
    run_id          varchar not null,
    deployment      varchar not null,
    model           varchar not null,
    endpoint        varchar not null,
    nodes           integer not null,
    hardware        varchar,
    replicas        integer not null,
    parallel_slots  integer,
    reports_usage   boolean not null,
    extra_body_json json,
    timeout_total_s double
);

create table if not exists raw.server_metrics (
    wave_id  varchar not null,
    phase    varchar not null,   -- before | after
    name     varchar not null,
    labels   varchar not null,   -- sorted JSON of the labels ('' when none), for reading
    value    double,
    label_map map(varchar, varchar)  -- the labels, structured: filter with element_at/map_values
);

-- written by `sparkcap validate` (one run's rows replaced per validation)
create table if not exists raw.dq_results (
    run_id              varchar not null,
    wave_id             varchar,          -- NULL: the expectation's overall result
    deployment          varchar,
    workload            varchar,
    concurrency         integer,
    trial               integer,
    suite               varchar not null,
    expectation         varchar not null, -- sparkcap's id, e.g. code_output_length_exact
    expectation_type    varchar not null,
    blocking            boolean not null,
    success             boolean not null,
    observed_value      varchar,
    element_count       bigint,
    unexpected_count    bigint,
    sample_ids          varchar,          -- up to 10 offending request / wave ids
    validated_at        timestamptz not null
);

-- what each step of a night did per deployment: a night against an imperfect fleet measures
-- what it can, and says here what is missing and why
create table if not exists raw.step_outcomes (
    run_id       varchar not null,
    deployment   varchar,            -- NULL: a step of the whole night
    step         varchar not null,   -- preflight | sweep | probe:<name> | link-check
    status       varchar not null,   -- ok | failed
    reason       varchar,
    recorded_at  timestamptz not null
);

-- written by `sparkcap link-check` (one run's rows replaced per check)
create table if not exists raw.link_tests (
    run_id          varchar not null,
    deployment      varchar not null,
    link            varchar not null,
    node_a          varchar,
    node_b          varchar,
    nominal_gbps    double,
    achieved_gbps   double,       -- NULL when the command failed or printed nothing usable
    share           double,       -- achieved / nominal
    healthy         boolean,
    min_share       double,
    tool            varchar,      -- iperf3-json | ib-bw | plain
    error           varchar,
    measured_at     timestamptz not null
);
"""


class WarehouseBusy(RuntimeError):
    """Another process holds the DuckDB write lock."""


def _is_lock_error(exc: Exception) -> bool:
    msg = str(exc).lower()
    return "lock" in msg and ("conflicting" in msg or "could not set" in msg)


def connect(
    db_path: Path | str, *, read_only: bool = False, busy_wait_s: float | None = None
) -> duckdb.DuckDBPyConnection:
    """Open the warehouse, waiting a bounded time for another writer to let go."""
    if busy_wait_s is None:
        busy_wait_s = get_settings().busy_wait_s
    path = Path(db_path)
    if read_only and not path.exists():
        raise FileNotFoundError(f"no warehouse at {path} (run a sweep first)")
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + busy_wait_s
    delay = 0.05
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.IOException as exc:
            if not _is_lock_error(exc):
                raise
            if time.monotonic() >= deadline:
                raise WarehouseBusy(
                    f"database is busy: {path} is held by another process "
                    f"(waited {busy_wait_s:.0f} s)"
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


@contextlib.contextmanager
def open_warehouse(
    db_path: Path | str, *, read_only: bool = False, busy_wait_s: float | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    con = connect(db_path, read_only=read_only, busy_wait_s=busy_wait_s)
    try:
        if not read_only:
            ensure_schema(con)
        yield con
    finally:
        con.close()


@functools.cache
def _expected_columns() -> dict[tuple[str, str], list[tuple[str, str]]]:
    with duckdb.connect(":memory:") as mem:
        mem.execute(SCHEMA_SQL)
        rows = mem.execute(
            "select table_name, column_name, data_type from information_schema.columns "
            "where table_schema = 'raw' order by table_name, ordinal_position"
        ).fetchall()
    out: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for table, column, dtype in rows:
        out.setdefault(("raw", table), []).append((column, dtype))
    return out


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create the raw schema, and add any column a newer sparkcap expects to an older file.

    Columns are only ever added (the contract), so upgrading a warehouse is additive: old
    rows get NULL in the new columns and every query written against the old layout still runs.
    """
    con.execute(SCHEMA_SQL)
    have = {
        (t, c)
        for t, c in con.execute(
            "select table_name, column_name from information_schema.columns "
            "where table_schema = 'raw'"
        ).fetchall()
    }
    for (schema, table), columns in _expected_columns().items():
        for column, dtype in columns:
            if (table, column) not in have:
                con.execute(f'alter table {schema}.{table} add column "{column}" {dtype}')
    # 0.2 stopped judging saturation at capture time: the legacy column must admit NULL
    (legacy_not_null,) = con.execute(
        "select count(*) from information_schema.columns where table_schema = 'raw' "
        "and table_name = 'waves' and column_name = 'client_saturated' and is_nullable = 'NO'"
    ).fetchone() or (0,)
    if legacy_not_null:
        con.execute("alter table raw.waves alter column client_saturated drop not null")


def _ts(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC)


def record_run_start(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    config: dict[str, Any],
    started_at_ns: int,
    deployments: Sequence[Deployment] = (),
) -> None:
    con.execute("begin transaction")
    row = con.execute("select config_json from raw.runs where run_id = ?", [run_id]).fetchone()
    if row is None:
        con.execute(
            "insert into raw.runs (run_id, started_at, sparkcap_version, config_json, status) "
            "values (?, ?, ?, ?, 'running')",
            [run_id, _ts(started_at_ns), __version__, json.dumps(config, sort_keys=True)],
        )
    else:  # a sweep added to an open run: its sweeps join the run's recorded config
        before = json.loads(row[0] or "{}")
        if isinstance(before.get("sweeps"), list) and isinstance(config.get("sweeps"), list):
            config = {**before, "sweeps": before["sweeps"] + config["sweeps"]}
            con.execute(
                "update raw.runs set config_json = ? where run_id = ?",
                [json.dumps(config, sort_keys=True), run_id],
            )
    # only the deployments recorded now are replaced: a sweep added to an open run
    # (`sparkcap sweep --run`) keeps the rows of the deployments swept before it
    con.execute(
        "delete from raw.deployments where run_id = ? and list_contains(?, deployment)",
        [run_id, [d.name for d in deployments]],
    )
    for d in deployments:
        con.execute(
            "insert into raw.deployments (run_id, deployment, model, endpoint, nodes, hardware, "
            "replicas, parallel_slots, reports_usage, extra_body_json, timeout_total_s) "
            "values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                run_id,
                d.name,
                d.model,
                str(d.endpoint),
                d.nodes,
                d.hardware or None,
                d.replicas,
                d.parallel_slots,
                d.reports_usage,
                json.dumps(d.extra_body, sort_keys=True),
                d.timeouts.total_s,
            ],
        )
    con.execute("commit")


def record_run_end(
    con: duckdb.DuckDBPyConnection, run_id: str, status: str, reason: str | None = None
) -> None:
    # a run that several sweeps add to stays incomplete once any of them was, with every reason
    con.execute(
        "update raw.runs set finished_at = ?, "
        "status = case when status = 'incomplete' then 'incomplete' else ? end, "
        "status_reason = case when status = 'incomplete' and status_reason is not null "
        "then status_reason || coalesce('; ' || ?, '') else ? end where run_id = ?",
        [datetime.now(UTC), status, reason, reason, run_id],
    )
    con.execute("checkpoint")


def _col(values: Sequence[Any], typ: pa.DataType) -> pa.Array:
    return pa.array(values, type=typ)


def wave_tables(wave: WaveRecord) -> dict[str, pa.Table]:
    """Arrow tables for one wave: ``waves`` (one row), ``requests``, ``chunks``,
    ``client_processes``."""
    reqs = wave.requests
    waves = pa.table(
        {
            "wave_id": _col([wave.wave_id], pa.string()),
            "run_id": _col([wave.run_id], pa.string()),
            "deployment": _col([wave.deployment], pa.string()),
            "model": _col([wave.model], pa.string()),
            "endpoint": _col([wave.endpoint], pa.string()),
            "workload": _col([wave.workload], pa.string()),
            "concurrency": _col([wave.concurrency], pa.int32()),
            "trial": _col([wave.trial], pa.int32()),
            "started_at": _col([_ts(wave.started_at_ns)], pa.timestamp("us", tz="UTC")),
            "start_skew_ms": _col([wave.start_skew_ms], pa.float64()),
            "loop_lag_p99_ms": _col([wave.loop_lag_p99_ms], pa.float64()),
            "client_cpu_pct": _col([wave.client_cpu_pct], pa.float64()),
            "loop_lag_max_ms": _col([wave.loop_lag_max_ms], pa.float64()),
            "timing_error_bound": _col([wave.timing_error_bound], pa.float64()),
            "attempt": _col([wave.attempt], pa.int32()),
            "superseded_reason": _col([wave.superseded_reason], pa.string()),
            "metrics_error": _col([wave.metrics_error], pa.string()),
            "client_process_count": _col([len(wave.client_processes) or None], pa.int32()),
            "duration_s": _col([wave.duration_s], pa.float64()),
            "n_requests": _col([len(reqs)], pa.int32()),
            "staged_at": _col([datetime.now(UTC)], pa.timestamp("us", tz="UTC")),
            "probe": _col([wave.extra.get("probe")], pa.string()),
        }
    )
    requests = pa.table(
        {
            "request_id": _col([r.request_id for r in reqs], pa.string()),
            "wave_id": _col([wave.wave_id] * len(reqs), pa.string()),
            "run_id": _col([wave.run_id] * len(reqs), pa.string()),
            "stream_index": _col([r.stream_index for r in reqs], pa.int32()),
            "prompt_id": _col([r.prompt_id for r in reqs], pa.string()),
            "requested_tokens": _col([r.requested_tokens for r in reqs], pa.int32()),
            "required_tokens": _col([r.required_tokens for r in reqs], pa.int32()),
            "temperature": _col([r.temperature for r in reqs], pa.float64()),
            "sent_ns": _col([r.sent_ns for r in reqs], pa.int64()),
            "first_token_ns": _col([r.first_token_ns for r in reqs], pa.int64()),
            "last_token_ns": _col([r.last_token_ns for r in reqs], pa.int64()),
            "end_ns": _col([r.end_ns for r in reqs], pa.int64()),
            "headers_ns": _col([r.headers_ns for r in reqs], pa.int64()),
            "completion_tokens": _col([r.completion_tokens for r in reqs], pa.int32()),
            "prompt_tokens": _col([r.prompt_tokens for r in reqs], pa.int32()),
            "cached_prompt_tokens": _col([r.cached_prompt_tokens for r in reqs], pa.int32()),
            "count_source": _col([str(r.count_source) for r in reqs], pa.string()),
            "finish_reason": _col([r.finish_reason for r in reqs], pa.string()),
            "status": _col([str(r.status) for r in reqs], pa.string()),
            "http_status": _col([r.http_status for r in reqs], pa.int32()),
            "error": _col([r.error for r in reqs], pa.string()),
            "retry_after": _col([r.retry_after for r in reqs], pa.string()),
            "saw_done": _col([r.saw_done for r in reqs], pa.bool_()),
            "n_chunks": _col([r.n_chunks for r in reqs], pa.int32()),
            "role": _col([r.role for r in reqs], pa.string()),
            "first_token_exact": _col([r.first_token_exact for r in reqs], pa.bool_()),
            "last_token_exact": _col([r.last_token_exact for r in reqs], pa.bool_()),
        }
    )
    counts = np.fromiter((len(r.chunks) for r in reqs), dtype=np.int64, count=len(reqs))
    total = int(counts.sum())
    if total:
        t_ns = np.concatenate([np.frombuffer(r.chunks.t_ns, dtype=np.int64) for r in reqs])
        n_tok = np.concatenate([np.frombuffer(r.chunks.n_tokens, dtype=np.int64) for r in reqs])
        n_chars = np.concatenate([np.frombuffer(r.chunks.n_chars, dtype=np.int64) for r in reqs])
        starts = np.repeat(np.cumsum(counts) - counts, counts)
        seq = np.arange(total, dtype=np.int64) - starts
        idx = np.repeat(np.arange(len(reqs), dtype=np.int32), counts)
    else:
        t_ns = n_tok = n_chars = seq = np.zeros(0, dtype=np.int64)
        idx = np.zeros(0, dtype=np.int32)
    chunks = chunk_table(
        idx, pa.array([r.request_id for r in reqs], pa.string()), seq, t_ns, n_tok, n_chars
    )
    procs = wave.client_processes
    client_processes = pa.table(
        {
            "wave_id": _col([wave.wave_id] * len(procs), pa.string()),
            "process_index": _col([p.process_index for p in procs], pa.int32()),
            "pid": _col([p.pid for p in procs], pa.int32()),
            "n_streams": _col([p.n_streams for p in procs], pa.int32()),
            "released_ns": _col([p.released_ns for p in procs], pa.int64()),
            "ended_ns": _col([p.ended_ns for p in procs], pa.int64()),
            "loop_lag_p99_ms": _col([p.loop_lag_p99_ms for p in procs], pa.float64()),
            "loop_lag_max_ms": _col([p.loop_lag_max_ms for p in procs], pa.float64()),
            "cpu_pct": _col([p.cpu_pct for p in procs], pa.float64()),
            "timing_error_bound": _col([p.timing_error_bound for p in procs], pa.float64()),
        }
    )
    return {
        "waves": waves,
        "requests": requests,
        "chunks": chunks,
        "client_processes": client_processes,
    }


def chunk_table(
    request_index: np.ndarray,
    request_ids: pa.Array,
    seq: np.ndarray,
    t_ns: np.ndarray,
    n_tokens: np.ndarray,
    n_chars: np.ndarray,
) -> pa.Table:
    """Chunk rows as Arrow columns; request ids dictionary-encoded so they cost an int each."""
    return pa.table(
        {
            "request_id": pa.DictionaryArray.from_arrays(pa.array(request_index), request_ids),
            "seq": pa.array(seq.astype(np.int32)),
            "t_ns": pa.array(t_ns),
            "n_tokens": pa.array(n_tokens.astype(np.int32), mask=n_tokens == NO_TOKENS),
            "n_chars": pa.array(n_chars.astype(np.int32)),
        }
    )


def stage_tables(
    con: duckdb.DuckDBPyConnection,
    wave_ids: Sequence[str],
    tables: dict[str, pa.Table],
    server_metrics: pa.Table | None = None,
) -> None:
    """Replace the given waves' rows in one transaction (idempotent re-staging)."""
    ids = list(wave_ids)
    con.execute("begin transaction")
    try:
        # only a re-staged wave pays for the deletes (raw.waves is small; raw.chunks is not)
        (existing,) = con.execute(
            "select count(*) from raw.waves where list_contains(?, wave_id)", [ids]
        ).fetchall()[0]
        if existing:
            con.execute(
                "delete from raw.chunks where request_id in (select request_id from "
                "raw.requests where list_contains(?, wave_id))",
                [ids],
            )
            for name in ("requests", "server_metrics", "client_processes", "waves"):
                con.execute(f"delete from raw.{name} where list_contains(?, wave_id)", [ids])
        for name in ("waves", "requests", "chunks", "client_processes"):
            if name in tables:  # a wave spooled by sparkcap < 0.3 has no client_processes
                _insert(con, f"raw.{name}", tables[name])
        if server_metrics is not None and server_metrics.num_rows:
            _insert(con, "raw.server_metrics", server_metrics)
        con.execute("commit")
    except BaseException:
        con.execute("rollback")
        raise


def _insert(con: duckdb.DuckDBPyConnection, target: str, table: pa.Table) -> None:
    """Bulk insert an Arrow table by column name (columns it lacks stay NULL)."""
    cols = ", ".join(f'"{c}"' for c in table.column_names)
    stage_arrow = table  # noqa: F841 - found by DuckDB's replacement scan below
    con.execute(f"insert into {target} ({cols}) select {cols} from stage_arrow")


def replace_run_rows(db_path: Path | str, table_name: str, run_id: str, rows: pa.Table) -> None:
    """Replace one run's rows of a results table in one transaction (re-running replaces)."""
    with open_warehouse(db_path) as con:
        ensure_schema(con)
        con.execute("begin transaction")
        try:
            con.execute(f"delete from {table_name} where run_id = ?", [run_id])
            _insert(con, table_name, rows)
            con.execute("commit")
        except BaseException:
            con.execute("rollback")
            raise


def metrics_table(wave: WaveRecord) -> pa.Table:
    from sparkcap.metrics_scrape import labels_text

    rows = wave.server_metrics
    return pa.table(
        {
            "wave_id": pa.array([wave.wave_id] * len(rows), pa.string()),
            "phase": pa.array([r[0] for r in rows], pa.string()),
            "name": pa.array([r[1] for r in rows], pa.string()),
            "labels": pa.array([labels_text(r[2]) for r in rows], pa.string()),
            "value": pa.array([r[3] for r in rows], pa.float64()),
            "label_map": pa.array(
                [list(r[2].items()) for r in rows], pa.map_(pa.string(), pa.string())
            ),
        }
    )


def stage_wave(con: duckdb.DuckDBPyConnection, wave: WaveRecord) -> None:
    stage_tables(con, [wave.wave_id], wave_tables(wave), metrics_table(wave))


def stage_wave_to(db_path: Path | str, wave: WaveRecord) -> None:
    """Open, stage one wave in one transaction, close: other processes can read in between."""
    with open_warehouse(db_path) as con:
        stage_wave(con, wave)


def run_start_to(
    db_path: Path | str,
    run_id: str,
    config: dict[str, Any],
    started_ns: int,
    deployments: Sequence[Deployment] = (),
) -> None:
    with open_warehouse(db_path) as con:
        record_run_start(con, run_id, config, started_ns, deployments)


def record_step_to(
    db_path: Path | str,
    run_id: str,
    deployment: str | None,
    step: str,
    status: str,
    reason: str | None = None,
) -> None:
    """Record (or replace) what one step did for one deployment of a run."""
    with open_warehouse(db_path) as con:
        con.execute("begin transaction")
        con.execute(
            "delete from raw.step_outcomes where run_id = ? and deployment is not distinct from ? "
            "and step = ?",
            [run_id, deployment, step],
        )
        con.execute(
            "insert into raw.step_outcomes values (?, ?, ?, ?, ?, ?)",
            [
                run_id,
                deployment,
                step,
                status,
                (reason or None) and reason[:1000],
                datetime.now(UTC),
            ],
        )
        con.execute("commit")


def run_end_to(db_path: Path | str, run_id: str, status: str, reason: str | None = None) -> None:
    with open_warehouse(db_path) as con:
        record_run_end(con, run_id, status, reason)
