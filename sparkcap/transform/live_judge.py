"""The live judge of a search: dbt's own rules, run in-process on the figures just measured.

A search must decide after every trial whether a level is settled, before anything is staged
or built. Rather than write the rules again in Python, the judge compiles dbt macros once
(``dbt compile --inline``, a few seconds per night, with the night's threshold and bootstrap
vars): ``decode_overlap`` (a wave whose streams never all decoded at once was queued, and
its level cannot pass, as in the grid's rule), ``search_level_interval`` (the interval of
the level median and its verdict) and, for agent sessions, ``session_ttft_within_ceiling``
(the turns' TTFT at the quantile against the ceiling), and runs that SQL with an in-memory
DuckDB on the level's live measurements. The capture's re-measure decision is compiled with
them (``client_spoiled_waves``, :class:`ClientSpoiledRule`), for a grid night as for a search.
``int_trials`` and ``int_search_levels`` run the same macros on the staged waves, so a live
interval and the recorded one differ only where dbt's verdict weighs what the live one cannot
(data quality, a TTFT spread against the lowest level); ``fct_search_path`` says where.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, NamedTuple

from sparkcap.errors import BuildError, JudgeError
from sparkcap.loadgen.records import RequestRecord, Status, WaveRecord, is_count
from sparkcap.loadgen.search import LevelJudgement
from sparkcap.transform.dbt_build import judgement_vars
from sparkcap.transform.dbt_compile import compile_inline

_SPLIT = "-- sparkcap: next rule --"
_INLINE = "\n".join(
    [
        "{{ search_level_interval('live_streams') }}",
        _SPLIT,
        "{{ decode_overlap('live_requests') }}",
        _SPLIT,
        "select level_key, trial, confidence, {{ level_decode_tok_s('status',"
        " 'completion_tokens', 'first_token_ns', 'last_token_ns', full_length_tokens("
        "'full_tokens', 'requested_tokens', 'length_factor'),"
        " 'length_factor', first_chunk_tokens('completion_tokens',"
        " 'first_chunk_counted_tokens', 'first_chunk_chars', 'total_chars'),"
        " 'window_decode_tok_s') }} as decode_tok_s from live_stream_windows",
        _SPLIT,
        "{{ window_decode_tok_s('live_stream_times', 'live_chunks') }}",
        _SPLIT,
        "{{ first_chunk_figures('live_chunks') }}",
        _SPLIT,
        "{{ session_ttft_within_ceiling('live_turns') }}",
        _SPLIT,
        "{{ client_spoiled_waves('live_wave_streams') }}",
    ]
)


class Rules(NamedTuple):
    """dbt's rules the live search runs, each compiled to SQL over the waves so far."""

    interval_sql: str  # search_level_interval: the level's interval and verdict
    overlap_sql: str  # decode_overlap: streams that never decoded together were queued
    rate_sql: str  # level_decode_tok_s: a shortened trial judged as its full-length stream
    window_sql: str  # the decode window a shortened stream is read over
    k1_sql: str  # the first chunk's tokens of a shortened stream
    session_ttft_sql: str  # an agent level's turns' TTFT quantile
    client_spoiled_sql: str  # client_spoiled_waves: why the client spoiled a wave, if it did


_PARTS = len(Rules._fields)


def compile_search_rule(
    dbt_vars: dict[str, Any] | None = None,
) -> Rules:
    """The SQL of ``search_level_interval('live_streams')``, of
    ``decode_overlap('live_requests')`` and of the level's stream rate (``level_decode_tok_s``,
    a shortened trial judged as the full-length stream it stands in for) under
    these vars (cached by :func:`~sparkcap.transform.dbt_compile.compile_inline`, as is the
    project's parse): the live search decides with dbt's own rules, never a copy."""
    try:
        compiled = compile_inline(_INLINE, dbt_vars)
    except BuildError as exc:
        raise JudgeError(f"could not compile dbt's search rule: {exc}") from None
    parts = compiled.split(_SPLIT)
    if len(parts) != _PARTS:
        raise JudgeError("could not compile dbt's search rule: a rule is missing")
    return Rules(*parts)


class ClientSpoiledRule:
    """dbt's client-spoiled rule (macro ``client_spoiled_waves``), compiled: called with a wave
    just measured, it says why the client spoiled it, in the words ``int_trial_validity``
    records (``None``: it did not). The night hands it to the sweep (``loadgen.sweep``), which
    measures such a wave again: a wave is re-measured exactly when dbt will call it spoiled."""

    def __init__(self, sql: Rules) -> None:
        self.sql = sql.client_spoiled_sql

    @classmethod
    def compile(cls, threshold_tok_s: float | None = None) -> ClientSpoiledRule:
        """The rule under the vars a build in this environment takes (SPARKCAP_DBT_VARS, then
        the project's); ``threshold_tok_s`` as a search judge is compiled with, so a search
        night compiles its rules once (:func:`compile_search_rule` caches by vars)."""
        given = {} if threshold_tok_s is None else {"threshold_tok_s": threshold_tok_s}
        return cls(compile_search_rule(given))

    def __call__(self, wave: WaveRecord) -> str | None:
        rows = _on_request_times(
            self.sql,
            "live_wave_streams",
            [wave],
            ("first_token_ns", "last_token_ns"),
            ("timing_error_bound", "start_skew_ms"),
        )
        return None if not rows or rows[0][1] is None else str(rows[0][1])


def live_valid(wave: WaveRecord) -> bool:
    """A wave the live figures may use: every asked stream recorded and ok, and the client's
    own timing trusted (the capture-time rule that also decides re-measurement). dbt's
    verdict of record also weighs data quality and a TTFT spread; where it differs,
    fct_search_path says so."""
    reqs = wave.requests
    # an agent level counts sessions, each of which sent its turns
    recorded = len({r.session_id for r in reqs}) if wave.workload == "agent" else len(reqs)
    return (
        bool(reqs)
        and recorded == wave.concurrency
        and wave.superseded_reason is None
        and wave.client_spoiled_live is None
        and all(r.status is Status.OK for r in reqs)
    )


def live_chunks(streams: Sequence[tuple[WaveRecord, RequestRecord]]) -> Any:
    """The streams' content chunks as staging stores them (raw.chunks: a per-chunk count
    outside 0..2^31-1, or none, is NULL), for the window rule."""
    import pyarrow as pa

    ids: list[str] = []
    seq: list[int] = []
    t_ns: list[int] = []
    n_tokens: list[int | None] = []
    n_chars: list[int] = []
    for _, r in streams:
        c = r.chunks
        ids.extend([r.request_id] * len(c))
        seq.extend(range(len(c)))
        t_ns.extend(c.t_ns)
        n_tokens.extend(n if is_count(n) else None for n in c.n_tokens)
        n_chars.extend(c.n_chars)
    return pa.table(
        {
            "request_id": ids,
            "seq": pa.array(seq, pa.int32()),
            "t_ns": pa.array(t_ns, pa.int64()),
            "n_tokens": pa.array(n_tokens, pa.int64()),
            "n_chars": pa.array(n_chars, pa.int64()),
        }
    )


def _on_request_times(
    sql: str,
    view: str,
    waves: Sequence[WaveRecord],
    columns: tuple[str, ...],
    wave_columns: tuple[str, ...] = (),
) -> list[tuple[Any, ...]]:
    """Run a compiled rule on the waves' requests as ``view`` (wave_id and the named ns
    timestamps, as raw.requests stores them, beside each named figure of the request's wave,
    as raw.waves stores it) in an in-memory DuckDB."""
    import duckdb
    import pyarrow as pa

    reqs = [(w, r) for w in waves for r in w.requests]
    table = pa.table(
        {
            "wave_id": [w.wave_id for w, _ in reqs],
            **{c: pa.array([getattr(r, c) for _, r in reqs], pa.int64()) for c in columns},
            **{c: pa.array([getattr(w, c) for w, _ in reqs], pa.float64()) for c in wave_columns},
        }
    )
    with duckdb.connect(":memory:") as con:
        con.register(view, table)
        return con.execute(sql).fetchall()


class SearchJudge:
    """Callable judge for ``loadgen.search.run_search``."""

    def __init__(self, threshold_tok_s: float, sql: Rules) -> None:
        self.threshold_tok_s = threshold_tok_s
        (
            self.interval_sql,
            self.overlap_sql,
            self.rate_sql,
            self.window_sql,
            self.k1_sql,
            self.session_ttft_sql,
            _,
        ) = sql

    @classmethod
    def compile(cls, threshold_tok_s: float | None = None) -> SearchJudge:
        """The judge at ``threshold_tok_s`` where the fleet names one, else at the threshold
        a build in this environment takes (SPARKCAP_DBT_VARS, then the project's default):
        the live decision reads its vars where dbt reads them."""
        given = {} if threshold_tok_s is None else {"threshold_tok_s": threshold_tok_s}
        threshold = float({**judgement_vars(), **given}["threshold_tok_s"])
        return cls(threshold, compile_search_rule(given))

    def queued(self, waves: Sequence[WaveRecord]) -> set[str]:
        """Waves dbt's overlap rule calls queued (the server ran fewer streams than asked)."""
        rows = _on_request_times(
            self.overlap_sql,
            "live_requests",
            waves,
            ("first_token_ns", "last_token_ns"),
            ("loop_lag_max_ms",),  # how far the wave's stamps may be off
        )
        return {str(r[0]) for r in rows if r[2]}

    def over_ttft_ceiling(self, waves: Sequence[WaveRecord]) -> str | None:
        """Why dbt's TTFT rule fails these agent waves' level (``None``: within the ceiling,
        or no turn has a first token to judge)."""
        rows = _on_request_times(
            self.session_ttft_sql, "live_turns", waves, ("first_token_ns", "sent_ns")
        )
        row = rows[0] if rows else None
        if row is None or row[0] is None or row[1]:
            return None
        return f"turn TTFT {float(row[0]):.2f} s over the ceiling"

    def judge(self, key: str, waves: Sequence[WaveRecord], confidence: float) -> LevelJudgement:
        import duckdb
        import pyarrow as pa

        valid = [w for w in waves if live_valid(w)]
        sessions = [w for w in valid if w.workload == "agent"]
        if sessions and (over := self.over_ttft_ceiling(sessions)) is not None:
            # as int_levels judges an agent level: turns whose first token comes later than
            # the ceiling fail it, whatever their rate
            return LevelJudgement(len(valid), None, None, None, "fail", False, why=over)
        if valid and not sessions and (queued := self.queued(valid)):
            # as in dbt's level rule: a level whose counted trial queued streams cannot pass,
            # whatever its rate (the server has fewer slots than streams)
            return LevelJudgement(
                len(valid) - len(queued),
                None,
                None,
                None,
                "fail",
                False,
                why=f"queued: {len(queued)} trial(s) never had every stream decoding at once",
            )
        streams = [(w, r) for w in valid for r in w.requests]
        if not streams:
            return LevelJudgement(len(valid), None, None, None, "straddles", False)
        live_stream_times = pa.table(
            {
                "request_id": [r.request_id for _, r in streams],
                "wave_id": [w.wave_id for w, _ in streams],
                "level_key": [key] * len(streams),
                "trial": pa.array([w.trial for w, _ in streams], pa.int32()),
                "confidence": pa.array([confidence] * len(streams), pa.float64()),
                "status": [str(r.status.value) for _, r in streams],
                "completion_tokens": pa.array(
                    [r.completion_tokens for _, r in streams], pa.int64()
                ),
                "first_token_ns": pa.array([r.first_token_ns for _, r in streams], pa.int64()),
                "last_token_ns": pa.array([r.last_token_ns for _, r in streams], pa.int64()),
                "requested_tokens": pa.array([r.requested_tokens for _, r in streams], pa.int64()),
                "full_tokens": pa.array([r.full_tokens for _, r in streams], pa.int64()),
                "length_factor": pa.array([w.length_factor for w, _ in streams], pa.float64()),
            }
        )
        with duckdb.connect(":memory:") as con:
            con.register("live_stream_times", live_stream_times)
            con.register("live_chunks", live_chunks(streams))
            con.execute(f"create temp view live_windows as {self.window_sql}")
            con.execute(f"create temp view live_first_chunks as {self.k1_sql}")
            con.execute(
                "create temp view live_stream_windows as select s.*, w.window_decode_tok_s, "
                "f.first_chunk_counted_tokens, f.first_chunk_chars, f.total_chars "
                "from live_stream_times as s left join live_windows as w using (request_id) "
                "left join live_first_chunks as f using (request_id)"
            )
            con.execute(f"create temp view live_streams as {self.rate_sql}")
            counted = con.execute("select count(decode_tok_s) from live_streams").fetchone()
            if not counted or not counted[0]:
                return LevelJudgement(len(valid), None, None, None, "straddles", False)
            cur = con.execute(self.interval_sql)
            names = [d[0] for d in cur.description]
            found = cur.fetchall()
        if not found:
            return LevelJudgement(len(valid), None, None, None, "straddles", False)
        row = dict(zip(names, found[0], strict=True))
        median = float(row["median_decode_tok_s"])
        return LevelJudgement(
            n_valid_trials=len(valid),
            median_tok_s=median,
            ci_low_tok_s=float(row["ci_low_tok_s"]),
            ci_high_tok_s=float(row["ci_high_tok_s"]),
            verdict=str(row["verdict"]),
            passes_median=bool(row["passes_median"]),
            too_few_stream_rates=bool(row["too_few_stream_rates"]),
        )

    async def __call__(
        self, key: str, waves: Sequence[WaveRecord], confidence: float
    ) -> LevelJudgement:
        return await asyncio.to_thread(self.judge, key, list(waves), confidence)
