"""The DuckDB warehouse: the ``raw`` schema and the staging of waves into it.

Contract for ad-hoc SQL users: the tables and columns defined in ``sparkcap.store.schema``
keep their names (columns may be added, never renamed). Staging rules:
- one transaction per wave (delete-then-insert by ``wave_id``), so a crash loses at most the
  wave in flight and re-staging never duplicates rows;
- bulk inserts from Arrow, never row by row;
- DuckDB admits one writing process: connections are opened per unit of work and closed, and a
  held lock becomes :class:`WarehouseBusy` after a bounded wait instead of a stack trace.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import functools
import hashlib
import json
import os
import re
import socket
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from sparkcap import __version__
from sparkcap.config import Deployment, url_without_credentials
from sparkcap.errors import MissingFile, SparkcapError
from sparkcap.loadgen.discover import DECLARED, SPARKCAP, FactRow, declared_facts, sparkcap_facts
from sparkcap.loadgen.metrics import labels_text
from sparkcap.loadgen.records import MAX_COUNT, ReplayOffer, WaveRecord, stored_counts
from sparkcap.settings import get_settings
from sparkcap.store.schema import RAW_TABLES, SCHEMA_SQL, columns, raw_table

__all__ = [
    "SCHEMA_SQL",
    "StaleWarehouse",
    "StorageError",
    "ensure_schema",
    "open_warehouse",
    "stage_wave",
]


class WarehouseBusy(SparkcapError, RuntimeError):
    """The warehouse cannot take a write now: another process holds the DuckDB write lock
    (or, as :class:`StorageError`, its file or disk failed). A wave that meets it waits in
    the spool for the next ``stage``."""


class StaleWarehouse(SparkcapError, RuntimeError):
    """A reader's query does not bind: the file's marts (or raw tables) were built by a
    sparkcap that lacked a column this one reads. Said in one line with the command that
    rebuilds them, never DuckDB's binder traceback: columns are only ever added, so a build
    by this sparkcap (which also adds any raw column) is the whole remedy."""


class StorageError(WarehouseBusy):
    """A file sparkcap keeps its records in (the warehouse, a spooled wave) that cannot be
    read or written: corrupt or not DuckDB, a read-only file system, a full disk. One line
    naming the file and the operating system's cause (``ENOSPC``), never DuckDB's follow-on
    error (``cannot rollback - no transaction is active``). A subclass of
    :class:`WarehouseBusy` because the answer is the same: the wave stays in the spool and
    the command ends with one ``error:`` line."""


# the name the warehouse file is attached under in every connection: DuckDB would otherwise
# name its catalog after the file's stem, and a file called raw.duckdb or marts.duckdb makes
# ``raw.runs`` ambiguous (dbt's profile attaches it under the same name)
CATALOG = "warehouse"

# OS causes DuckDB reports in words, named by errno so a full disk reads as ENOSPC
_OS_CAUSES = {
    os.strerror(code): name
    for name in ("ENOSPC", "EDQUOT", "EROFS", "EACCES", "EPERM", "EIO", "ENOTDIR", "EISDIR")
    if (code := getattr(errno, name, None)) is not None
}


def warehouse_key(db_path: Path | str) -> str:
    """A folder name for one DuckDB file: readable stem plus a digest of its absolute path."""
    path = Path(db_path).resolve()
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", path.stem)[:40]
    return f"{stem}-{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"


def _is_lock_error(exc: Exception) -> bool:
    msg = str(exc).lower()
    return "lock" in msg and ("conflicting" in msg or "could not set" in msg)


def _cause(exc: BaseException) -> str | None:
    """The storage fault behind an exception, as one line; ``None`` when it is not one."""
    if isinstance(exc, OSError):
        name = errno.errorcode.get(exc.errno or 0)
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror or exc}{where}" + (f" ({name})" if name else "")
    if not isinstance(exc, duckdb.Error):
        return None
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    named = [name for words, name in _OS_CAUSES.items() if words in text]
    io_fault = isinstance(exc, duckdb.IOException | duckdb.FatalException) or bool(named)
    if not io_fault or _is_lock_error(exc):
        return None
    for prefix in ("IO Error: ", "FATAL Error: ", "TransactionContext Error: "):
        text = text.removeprefix(prefix)
    return text[:300] + (f" ({named[0]})" if named else "")


def storage_error(path: Path | str, doing: str, exc: BaseException) -> StorageError | None:
    """``exc`` as a :class:`StorageError` naming ``path``, when it is a storage fault."""
    cause = _cause(exc)
    return None if cause is None else StorageError(f"{path}: cannot {doing}: {cause}")


def _attach(path: Path, read_only: bool, busy_wait_s: float) -> duckdb.DuckDBPyConnection:
    # One named in-memory instance per file and mode: DuckDB shares it between this process's
    # connections (as it shares a file's own instance), so the file is attached once and
    # released, for other processes, when the last connection closes.
    resolved = path.resolve()
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:16]
    mode = "ro" if read_only else "rw"
    deadline = time.monotonic() + busy_wait_s
    delay = 0.05
    while True:
        con = duckdb.connect(
            f":memory:sparkcap-{mode}-{digest}",
            # spills beside the file, as for a file opened directly (not in the cwd's .tmp)
            config={"temp_directory": f"{resolved}.tmp"},
        )
        try:
            literal = str(resolved).replace("'", "''")
            con.execute(
                f"attach if not exists '{literal}' as {CATALOG}"
                + (" (read_only)" if read_only else "")
            )
            con.execute(f"use {CATALOG}")
            return con
        except duckdb.Error as exc:
            con.close()
            if not _is_lock_error(exc):
                raise
            if time.monotonic() >= deadline:
                raise WarehouseBusy(
                    f"database is busy: {path} is held by another process "
                    f"(waited {busy_wait_s:.0f} s)"
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


def connect(
    db_path: Path | str, *, read_only: bool = False, busy_wait_s: float | None = None
) -> duckdb.DuckDBPyConnection:
    """Open the warehouse, waiting a bounded time for another writer to let go. Any file
    name works (it is attached under :data:`CATALOG`); a file that cannot be opened is a
    :class:`StorageError` naming it and why."""
    if busy_wait_s is None:
        busy_wait_s = get_settings().busy_wait_s
    path = Path(db_path)
    if read_only and not path.exists():
        raise MissingFile(f"no warehouse at {path} (run a sweep first)")
    try:
        if not read_only:
            path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            raise StorageError(f"{path}: cannot open: is a folder, not a DuckDB file")
        return _attach(path, read_only, busy_wait_s)
    except (OSError, duckdb.Error) as exc:
        err = storage_error(path, "open", exc)
        if err is None:
            raise
        raise err from None


def has_table(con: duckdb.DuckDBPyConnection, schema: str, name: str) -> bool:
    """Whether ``schema.name`` is in this warehouse (a table or a view dbt built)."""
    row = con.execute(
        "select count(*) from information_schema.tables "
        "where table_schema = ? and table_name = ? and table_catalog = current_database()",
        [schema, name],
    ).fetchone()
    return bool(row and row[0])


@contextlib.contextmanager
def open_warehouse(
    db_path: Path | str, *, read_only: bool = False, busy_wait_s: float | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection for one unit of work. A storage fault met inside it (a full disk at
    commit, a corrupt block) leaves as one :class:`StorageError` naming the file."""
    con = connect(db_path, read_only=read_only, busy_wait_s=busy_wait_s)
    failed = True
    try:
        if not read_only:
            ensure_schema(con)
        yield con
        failed = False
    except duckdb.BinderException as exc:
        if not read_only:  # a writer's query that does not bind is sparkcap's own defect
            raise
        cause = str(exc).split("\n", 1)[0].removeprefix("Binder Error: ").strip()
        raise StaleWarehouse(
            f"{db_path}: built by another sparkcap ({cause}); run "
            f"`sparkcap build --db {db_path}` to build its marts with this one"
        ) from None
    except duckdb.Error as exc:
        err = storage_error(db_path, "use", exc)
        if err is None:
            raise
        raise err from None
    finally:
        try:
            con.close()
        except duckdb.Error as exc:
            if not failed:  # else the fault that got us here is the one to tell
                err = storage_error(db_path, "close", exc)
                if err is None:
                    raise
                raise err from None


@functools.cache
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
            "where table_schema = 'raw' and table_catalog = current_database()"
        ).fetchall()
    }
    for table in RAW_TABLES:
        for column, dtype in columns(table):
            if (table, column) not in have:
                con.execute(f'alter table raw.{table} add column "{column}" {dtype}')
    # 0.2 stopped judging saturation at capture time: the legacy column must admit NULL
    (legacy_not_null,) = con.execute(
        "select count(*) from information_schema.columns where table_schema = 'raw' "
        "and table_catalog = current_database() and table_name = 'waves' "
        "and column_name = 'client_saturated' and is_nullable = 'NO'"
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
            "replicas, parallel_slots, reports_usage, extra_body_json, timeout_total_s, "
            "reasoning) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                d.reasoning,
            ],
        )
    _record_declared_facts(con, run_id, deployments)
    con.execute("commit")


def _facts_table(run_id: str, deployment: str, rows: Sequence[FactRow]) -> pa.Table:
    at = datetime.now(UTC)
    return raw_table(
        "deployment_facts",
        {
            "run_id": [run_id] * len(rows),
            "deployment": [deployment] * len(rows),
            "fact": [r.fact for r in rows],
            "value": [r.value for r in rows],
            "text_value": [r.text_value for r in rows],
            "source": [r.source for r in rows],
            "detail": [r.detail for r in rows],
            "recorded_at": [at] * len(rows),
        },
    )


def _record_declared_facts(
    con: duckdb.DuckDBPyConnection, run_id: str, deployments: Sequence[Deployment]
) -> None:
    """The declared facts of the deployments recorded now, and what sparkcap knows of them
    (their settings' hash, this client host), replacing what was recorded before (a sweep
    joining its run again); what discovery found is replaced by discovery."""
    con.execute(
        "delete from raw.deployment_facts where run_id = ? and source in (?, ?) "
        "and list_contains(?, deployment)",
        [run_id, DECLARED, SPARKCAP, [d.name for d in deployments]],
    )
    host = get_settings().client_host
    for d in deployments:
        rows = declared_facts(d) + sparkcap_facts(d, host)
        _insert(con, "raw.deployment_facts", _facts_table(run_id, d.name, rows))


def record_discovered_facts_to(
    db_path: Path | str, run_id: str, deployment: str, rows: Sequence[FactRow]
) -> None:
    """Replace what discovery found for one deployment of a run, in one transaction; the
    declared rows and sparkcap's own stay."""
    with open_warehouse(db_path) as con:
        con.execute("begin transaction")
        try:
            con.execute(
                "delete from raw.deployment_facts where run_id = ? and deployment = ? "
                "and source not in (?, ?)",
                [run_id, deployment, DECLARED, SPARKCAP],
            )
            if rows:
                _insert(con, "raw.deployment_facts", _facts_table(run_id, deployment, rows))
            con.execute("commit")
        except BaseException:
            _rollback(con)
            raise


def record_client_hosts_to(db_path: Path | str, run_id: str, hosts: dict[str, str]) -> None:
    """Replace each named deployment's ``client_host`` with the hosts that measured it: in a
    distributed night the workers, not the parent that recorded the run (``hosts``: deployment
    -> their names, joined)."""
    with open_warehouse(db_path) as con:
        con.execute("begin transaction")
        try:
            for deployment, host in hosts.items():
                con.execute(
                    "delete from raw.deployment_facts where run_id = ? and deployment = ? "
                    "and fact = 'client_host' and source = ?",
                    [run_id, deployment, SPARKCAP],
                )
                row = FactRow(
                    "client_host",
                    None,
                    SPARKCAP,
                    "the hosts the night's children ran on",
                    text_value=host[:256],
                )
                _insert(con, "raw.deployment_facts", _facts_table(run_id, deployment, [row]))
            con.execute("commit")
        except BaseException:
            _rollback(con)
            raise


def record_run_end(
    con: duckdb.DuckDBPyConnection, run_id: str, status: str, reason: str | None = None
) -> None:
    # a distributed night marked abandoned when its parent died is finished from its lake
    # (`sparkcap run --finish`): that account of the night replaces the provisional one
    con.execute(
        "update raw.runs set status = 'running', status_reason = null where run_id = ? "
        "and status = 'incomplete' and starts_with(status_reason, ?) "
        "and json_exists(config_json, '$.distributed')",
        [run_id, f"{ABANDONED}: "],
    )
    # a run that several sweeps add to stays incomplete once any of them was, with every reason
    con.execute(
        "update raw.runs set finished_at = ?, "
        "status = case when status = 'incomplete' then 'incomplete' else ? end, "
        "status_reason = case when status = 'incomplete' and status_reason is not null "
        "then status_reason || coalesce('; ' || ?, '') else ? end where run_id = ?",
        [datetime.now(UTC), status, reason, reason, run_id],
    )
    con.execute(f"checkpoint {CATALOG}")


def wave_tables(wave: WaveRecord) -> dict[str, pa.Table]:
    """Arrow tables for one wave: ``waves`` (one row), ``requests``, ``chunks``,
    ``client_processes``.

    Nothing a server sent may wrap or raise here: token counts are checked again against
    the int32 columns (``stored_counts``) and an endpoint never carries its credentials."""
    reqs = wave.requests
    stored = [stored_counts(r) for r in reqs]
    waves = raw_table(
        "waves",
        {
            "wave_id": [wave.wave_id],
            "run_id": [wave.run_id],
            "deployment": [wave.deployment],
            "model": [wave.model],
            "endpoint": [url_without_credentials(wave.endpoint)],
            "workload": [wave.workload],
            "concurrency": [wave.concurrency],
            "trial": [wave.trial],
            "started_at": [_ts(wave.started_at_ns)],
            "start_skew_ms": [wave.start_skew_ms],
            "loop_lag_p99_ms": [wave.loop_lag_p99_ms],
            "client_cpu_pct": [wave.client_cpu_pct],
            "loop_lag_max_ms": [wave.loop_lag_max_ms],
            "timing_error_bound": [wave.timing_error_bound],
            "attempt": [wave.attempt],
            "superseded_reason": [wave.superseded_reason],
            "metrics_error": [wave.metrics_error],
            "client_process_count": [len(wave.client_processes) or None],
            "duration_s": [wave.duration_s],
            "n_requests": [len(reqs)],
            "staged_at": [datetime.now(UTC)],
            "probe": [wave.probe],
            "method": [wave.method],
            "search_step": [wave.search_step],
            "length_factor": [wave.length_factor],
            "cache_reset": [wave.cache_reset],
        },
    )
    requests = raw_table(
        "requests",
        {
            "request_id": [r.request_id for r in reqs],
            "wave_id": [wave.wave_id] * len(reqs),
            "run_id": [wave.run_id] * len(reqs),
            "stream_index": [r.stream_index for r in reqs],
            "prompt_id": [r.prompt_id for r in reqs],
            "requested_tokens": [r.requested_tokens for r in reqs],
            "full_tokens": [r.full_tokens for r in reqs],
            "required_tokens": [r.required_tokens for r in reqs],
            "temperature": [r.temperature for r in reqs],
            "sent_ns": [r.sent_ns for r in reqs],
            "first_token_ns": [r.first_token_ns for r in reqs],
            "last_token_ns": [r.last_token_ns for r in reqs],
            "end_ns": [r.end_ns for r in reqs],
            "headers_ns": [r.headers_ns for r in reqs],
            "completion_tokens": [c[0] for c in stored],
            "prompt_tokens": [c[1] for c in stored],
            "cached_prompt_tokens": [c[2] for c in stored],
            "count_source": [c[3] for c in stored],
            "finish_reason": [r.finish_reason for r in reqs],
            "status": [str(r.status) for r in reqs],
            "http_status": [r.http_status for r in reqs],
            "error": [c[4] for c in stored],
            "retry_after": [r.retry_after for r in reqs],
            "saw_done": [r.saw_done for r in reqs],
            "n_chunks": [r.n_chunks for r in reqs],
            "role": [r.role for r in reqs],
            "first_token_exact": [r.first_token_exact for r in reqs],
            "last_token_exact": [r.last_token_exact for r in reqs],
            "session_id": [r.session_id for r in reqs],
            "turn_index": [r.turn_index for r in reqs],
            "scheduled_ns": [r.scheduled_ns for r in reqs],
            "timing_error_bound": [r.timing_error_bound for r in reqs],
            "first_answer_ns": [r.first_answer_ns for r in reqs],
            "reasoning_chars": [r.reasoning_chars for r in reqs],
            "reasoning_tokens": [r.reasoning_tokens for r in reqs],
            "think_tag": [r.think_tag for r in reqs],
        },
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
    client_processes = raw_table(
        "client_processes",
        {
            "wave_id": [wave.wave_id] * len(procs),
            "process_index": [p.process_index for p in procs],
            "pid": [p.pid for p in procs],
            "n_streams": [p.n_streams for p in procs],
            "released_ns": [p.released_ns for p in procs],
            "ended_ns": [p.ended_ns for p in procs],
            "loop_lag_p99_ms": [p.loop_lag_p99_ms for p in procs],
            "loop_lag_max_ms": [p.loop_lag_max_ms for p in procs],
            "cpu_pct": [p.cpu_pct for p in procs],
            "timing_error_bound": [p.timing_error_bound for p in procs],
        },
    )
    d = wave.search_decision
    decisions = [d] if d is not None else []
    search_levels = raw_table(
        "search_levels",
        {
            "wave_id": [wave.wave_id] * len(decisions),
            "run_id": [wave.run_id] * len(decisions),
            "deployment": [wave.deployment] * len(decisions),
            "workload": [wave.workload] * len(decisions),
            "kind": [x.kind for x in decisions],
            "search_step": [x.search_step for x in decisions],
            "concurrency": [x.concurrency for x in decisions],
            "n_trials": [x.n_trials for x in decisions],
            "n_valid_trials": [x.n_valid_trials for x in decisions],
            "confidence": [x.confidence for x in decisions],
            "trials_max": [x.trials_max for x in decisions],
            "live_median_tok_s": [x.median_tok_s for x in decisions],
            "live_ci_low_tok_s": [x.ci_low_tok_s for x in decisions],
            "live_ci_high_tok_s": [x.ci_high_tok_s for x in decisions],
            "live_verdict": [x.verdict for x in decisions],
            "stop_reason": [x.stop_reason for x in decisions],
            "next_action": [x.next_action for x in decisions],
        },
    )
    return {
        "waves": waves,
        "requests": requests,
        "chunks": chunks,
        "client_processes": client_processes,
        "search_levels": search_levels,
        "power_samples": power_table(wave),
        "replay_offers": replay_table(wave),
    }


def replay_table(wave: WaveRecord) -> pa.Table:
    """A replay wave's offer, one row; no row for any other wave."""
    offers = [wave.replay_offer] if wave.replay_offer is not None else []
    return raw_table(
        "replay_offers",
        {
            "wave_id": [wave.wave_id] * len(offers),
            # the offer's fields are the table's columns (raw_table refuses any other)
            **{
                f.name: [getattr(o, f.name) for o in offers]
                for f in dataclasses.fields(ReplayOffer)
            },
        },
    )


def power_table(wave: WaveRecord) -> pa.Table:
    """The wave's power readings (loadgen/power.py); a value the sampler refused is NULL."""
    rows = wave.power_samples
    return raw_table(
        "power_samples",
        {
            "wave_id": [wave.wave_id] * len(rows),
            "seq": [r.seq for r in rows],
            "t_ns": [r.t_ns for r in rows],
            "source": [r.source for r in rows],
            "sensor": [r.sensor for r in rows],
            "metric": [r.metric for r in rows],
            "quantity": [r.quantity for r in rows],
            "value": [r.value for r in rows],
            "status": [r.status for r in rows],
            "reason": [r.reason for r in rows],
            "read_rtt_ns": [r.read_rtt_ns for r in rows],
        },
    )


def chunk_table(
    request_index: np.ndarray,
    request_ids: pa.Array,
    seq: np.ndarray,
    t_ns: np.ndarray,
    n_tokens: np.ndarray,
    n_chars: np.ndarray,
) -> pa.Table:
    """Chunk rows as Arrow columns; request ids dictionary-encoded so they cost an int each.

    A per-chunk count outside the int32 column (``NO_TOKENS``, or anything a server's
    counters could make) is NULL, never wrapped by the cast."""
    unknown = (n_tokens < 0) | (n_tokens > MAX_COUNT)
    return raw_table(
        "chunks",
        {
            "request_id": pa.DictionaryArray.from_arrays(pa.array(request_index), request_ids),
            "seq": pa.array(seq.astype(np.int32)),
            "t_ns": pa.array(t_ns),
            "n_tokens": pa.array(np.where(unknown, 0, n_tokens).astype(np.int32), mask=unknown),
            "n_chars": pa.array(n_chars.astype(np.int32)),
        },
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
            for name in (
                "requests",
                "server_metrics",
                "client_processes",
                "search_levels",
                "power_samples",
                "replay_offers",
                "waves",
            ):
                con.execute(f"delete from raw.{name} where list_contains(?, wave_id)", [ids])
        for name in (
            "waves",
            "requests",
            "chunks",
            "client_processes",
            "search_levels",
            "power_samples",
            "replay_offers",
        ):
            # older spools lack client_processes (< 0.3), search_levels, power_samples,
            # replay_offers
            if name in tables:
                _insert(con, f"raw.{name}", tables[name])
        if server_metrics is not None and server_metrics.num_rows:
            _insert(con, "raw.server_metrics", server_metrics)
        con.execute("commit")
    except BaseException:
        _rollback(con)
        raise


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Undo the open transaction, if DuckDB still has one: a commit that failed (a full disk
    writing the WAL) has already ended it, and the rollback's own error ("no transaction is
    active") must not replace the fault that ended it."""
    with contextlib.suppress(duckdb.Error):
        con.execute("rollback")


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
            _rollback(con)
            raise


def metrics_table(wave: WaveRecord) -> pa.Table:

    rows = wave.server_metrics
    return raw_table(
        "server_metrics",
        {
            "wave_id": [wave.wave_id] * len(rows),
            "phase": [r[0] for r in rows],
            "name": [r[1] for r in rows],
            "labels": [labels_text(r[2]) for r in rows],
            "value": [r[3] for r in rows],
            "label_map": [list(r[2].items()) for r in rows],
        },
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
    """Record the run's start (or a sweep joining it) and mark this process as its writer."""
    with open_warehouse(db_path) as con:
        mark_abandoned(con, db_path)
        _hold_run(db_path, run_id)
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
    _release_run(db_path, run_id)


# -- runs whose writer died -------------------------------------------------------------
#
# A run is `running` from its start until its writer records the end. A writer killed with
# kill -9 (or whose host lost power) never does, and no later process can tell from the row
# alone whether the run is still being measured: a hand-made `sparkcap sweep` may write
# between its waves while another reads, and a distributed night's parent holds its run
# `running` for hours while its children sweep and never opens the warehouse meanwhile. So
# each writer holds an advisory lock (flock) on a file of its own under
# $SPARKCAP_HOME/runs/<warehouse>/<run>/ for as long as the run is open in it. The kernel
# drops the lock when the process ends, however it ends; a run whose every lock file can be
# taken has no live writer, and the next run's start or `sparkcap stage` marks it incomplete,
# with the reason. A run with no lock file at all (written by a sparkcap before 0.5.1, or
# under another SPARKCAP_HOME) is left as it is: nothing says its writer is gone.

_held_runs: dict[tuple[str, str], tuple[int, Path]] = {}  # (file, run) -> (fd, lock file)
ABANDONED = "abandoned"


def _runs_dir(db_path: Path | str) -> Path:
    return get_settings().work_dir / "runs" / warehouse_key(db_path)


def _hold_run(db_path: Path | str, run_id: str) -> None:
    """Take this process's lock on the run (kept until ``run_end_to`` or the process ends).
    Best effort: a home that cannot take the file costs only the later detection."""
    key = (str(Path(db_path).resolve()), run_id)
    if key in _held_runs:
        return
    folder = _runs_dir(db_path) / hashlib.sha256(run_id.encode()).hexdigest()[:16]
    lock = folder / f"{os.getpid()}-{os.urandom(4).hex()}.lock"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # blocking: a probe holds it for an instant at most
        owner = {"run_id": run_id, "pid": os.getpid(), "host": socket.gethostname()}
        os.write(fd, json.dumps(owner).encode())
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            lock.unlink()
        return
    _held_runs[key] = (fd, lock)


def _release_run(db_path: Path | str, run_id: str) -> None:
    entry = _held_runs.pop((str(Path(db_path).resolve()), run_id), None)
    if entry is None:
        return
    fd, lock = entry
    with contextlib.suppress(OSError):
        lock.unlink()  # before the lock goes: no one may find it untaken and judge the run dead
    os.close(fd)
    with contextlib.suppress(OSError):
        lock.parent.rmdir()


def _writer_gone(lock: Path) -> dict[str, Any] | None:
    """The owner a lock file names, when no process holds it any more; else ``None``."""
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return None  # held: its writer is alive
        try:
            owner = json.loads(os.pread(fd, 4096, 0) or b"null")
        except ValueError:
            return None
        return owner if isinstance(owner, dict) and isinstance(owner.get("run_id"), str) else None
    finally:
        os.close(fd)  # drops the probe's own lock


def _dead_runs(db_path: Path | str) -> dict[str, list[tuple[Path, dict[str, Any]]]]:
    """Runs of this warehouse with lock files and no live writer: run id -> its locks."""
    root = _runs_dir(db_path)
    if not root.is_dir():
        return {}
    held = {lock for fd, lock in _held_runs.values()}
    dead: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for folder in root.iterdir():
        locks = sorted(folder.glob("*.lock")) if folder.is_dir() else []
        owners = [(lock, _writer_gone(lock)) for lock in locks if lock not in held]
        if not locks or len(owners) < len(locks) or any(o is None for _, o in owners):
            continue  # a writer of this run is alive (or its lock file says nothing)
        for lock, owner in owners:
            if owner is not None:
                dead.setdefault(str(owner["run_id"]), []).append((lock, owner))
    return dead


def mark_abandoned(con: duckdb.DuckDBPyConnection, db_path: Path | str) -> list[str]:
    """Mark the runs whose writer died while they were ``running`` as incomplete, reason
    ``abandoned: …``; returns their ids. Cheap when there is nothing to mark (no files)."""
    dead = _dead_runs(db_path)
    marked: list[str] = []
    for run_id, locks in dead.items():
        row = con.execute(
            "select status, config_json from raw.runs where run_id = ?", [run_id]
        ).fetchone()
        if row is not None and row[0] == "running":
            who = ", ".join(f"pid {o.get('pid')} on {o.get('host')}" for _, o in locks)
            reason = f"{ABANDONED}: the process writing it ({who}) ended without finishing it"
            with contextlib.suppress(ValueError, TypeError):
                if json.loads(row[1] or "{}").get("distributed"):
                    reason += (
                        f"; its children's waves in the lake can still be staged with "
                        f"`sparkcap run --finish {run_id}`"
                    )
            con.execute(
                "update raw.runs set status = 'incomplete', status_reason = ? "
                "where run_id = ? and status = 'running'",
                [reason, run_id],
            )
            marked.append(run_id)
        for lock, _ in locks:
            with contextlib.suppress(OSError):
                lock.unlink()
            with contextlib.suppress(OSError):
                lock.parent.rmdir()
    return marked


def mark_abandoned_to(db_path: Path | str) -> list[str]:
    """``mark_abandoned`` in a connection of its own, opened only when a lock file says a
    writer died: a warehouse nothing was left running in is not opened at all."""
    if not Path(db_path).is_file() or not _dead_runs(db_path):
        return []
    with open_warehouse(db_path) as con:
        return mark_abandoned(con, db_path)
