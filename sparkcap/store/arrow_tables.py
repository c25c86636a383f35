"""One captured wave (and a run's deployment facts) as Arrow tables of the ``raw`` schema.

Nothing a server sent may wrap or raise here: token counts are checked again against the int32
columns and an endpoint never carries its credentials. The tables are built by
``schema.raw_table``, so a column outside the raw schema is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa

from sparkcap.config.deployment import url_without_credentials
from sparkcap.loadgen.discover import FactRow
from sparkcap.loadgen.metrics import labels_text
from sparkcap.loadgen.records import (
    MAX_COUNT,
    PowerSample,
    ProcessTiming,
    ReplayOffer,
    SearchDecision,
    WaveRecord,
    stored_counts,
)
from sparkcap.store.schema import raw_table

# raw.search_levels' columns of the search's live figures
_LIVE_COLUMNS = {
    "median_tok_s": "live_median_tok_s",
    "ci_low_tok_s": "live_ci_low_tok_s",
    "ci_high_tok_s": "live_ci_high_tok_s",
    "verdict": "live_verdict",
}


def utc_from_ns(ns: int) -> datetime:
    """A wall-clock time in nanoseconds since the epoch as an aware UTC datetime."""
    return datetime.fromtimestamp(ns / 1e9, tz=UTC)


def _record_columns(
    record: type[Any], rows: Sequence[Any], renamed: Mapping[str, str] | None = None
) -> dict[str, list[Any]]:
    """Rows of a dataclass as columns, one a field, each named as its field unless ``renamed``
    names its column: the record's fields are the table's columns (``raw_table`` refuses any
    other), so a field added to the record is a column to add to the schema."""
    names = renamed or {}
    return {
        names.get(f.name, f.name): [getattr(r, f.name) for r in rows]
        for f in dataclasses.fields(record)
    }


def facts_table(run_id: str, deployment: str, rows: Sequence[FactRow]) -> pa.Table:
    """``raw.deployment_facts`` rows for one deployment of a run, stamped now."""
    at = datetime.now(UTC)
    return raw_table(
        "deployment_facts",
        {
            "run_id": [run_id] * len(rows),
            "deployment": [deployment] * len(rows),
            **_record_columns(FactRow, rows),
            "recorded_at": [at] * len(rows),
        },
    )


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
            "started_at": [utc_from_ns(wave.started_at_ns)],
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
            **_record_columns(ProcessTiming, procs),
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
            # the live figures, named as such: dbt's fct_search_path holds those of record
            **_record_columns(SearchDecision, decisions, _LIVE_COLUMNS),
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
            **_record_columns(ReplayOffer, offers),
        },
    )


def power_table(wave: WaveRecord) -> pa.Table:
    """The wave's power readings (loadgen/power.py); a value the sampler refused is NULL."""
    rows = wave.power_samples
    return raw_table(
        "power_samples",
        {
            "wave_id": [wave.wave_id] * len(rows),
            **_record_columns(PowerSample, rows),
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
    counters could make) is NULL, never wrapped by the cast: ``records.is_count`` over the
    column at once."""
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


def metrics_table(wave: WaveRecord) -> pa.Table:
    """The server metrics scraped around the wave (before and after), one row a sample."""
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
