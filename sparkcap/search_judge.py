"""The live judge of a search: dbt's own level rule, run in-process on the figures just measured.

A search must decide after every trial whether a level is settled, before anything is staged
or built. Rather than write the interval and verdict again in Python, the judge compiles dbt's
``search_level_interval`` macro once (``dbt compile --inline``, a few seconds per night, with
the night's threshold and bootstrap vars) and runs that SQL with an in-memory DuckDB on the
level's live stream rates. ``int_search_levels`` runs the same macro on the staged waves, so a
live interval and the recorded one differ only where dbt's stored verdicts (data quality,
queueing seen from token overlap) differ from the live ones; ``fct_search_path`` says where.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sparkcap.loadgen.records import Status, WaveRecord
from sparkcap.loadgen.search import LevelJudgement
from sparkcap.progress import live_decode_tok_s

_COMPILE_LOCK = threading.Lock()
_COMPILED: dict[str, str] = {}


class JudgeError(RuntimeError):
    """dbt could not compile the search rule (the project or its vars are broken)."""


def compile_search_rule(dbt_vars: dict[str, Any] | None = None) -> str:
    """The SQL of ``search_level_interval('live_streams')`` under these vars (cached)."""
    import json

    from sparkcap.build import _release_dbt_logs, dbt_args

    key = json.dumps(dbt_vars or {}, sort_keys=True)
    with _COMPILE_LOCK:
        if key in _COMPILED:
            return _COMPILED[key]
        from dbt.cli.main import dbtRunner

        with tempfile.TemporaryDirectory(prefix="sparkcap-judge-") as tmp:
            scratch = Path(tmp) / "compile.duckdb"
            args = dbt_args(
                "compile",
                scratch,
                ["--inline", "{{ search_level_interval('live_streams') }}", "--log-level", "none"],
                dbt_vars,
            )
            # dbt's profile reads the warehouse path from the environment: point it at a scratch
            # file for the compile (nothing is read from it), then put the real one back
            saved = os.environ.get("SPARKCAP_DB")
            os.environ["SPARKCAP_DB"] = str(scratch)
            try:
                res = dbtRunner().invoke(args)
            finally:
                if saved is None:
                    os.environ.pop("SPARKCAP_DB", None)
                else:
                    os.environ["SPARKCAP_DB"] = saved
                _release_dbt_logs()
        results = getattr(res.result, "results", None) or []
        if not res.success or not results:
            why = str(res.exception or "no compiled node").strip().splitlines()[0]
            raise JudgeError(f"could not compile dbt's search rule: {why}")
        sql = str(results[0].node.compiled_code)
        _COMPILED[key] = sql
        return sql


def live_valid(wave: WaveRecord) -> bool:
    """A wave the live figures may use: every asked stream recorded and ok, and the client's
    own timing trusted (the capture-time rule that also decides re-measurement). dbt's
    verdict of record also weighs data quality and queueing; where it differs,
    fct_search_path says so."""
    reqs = wave.requests
    return (
        bool(reqs)
        and len(reqs) == wave.concurrency
        and wave.superseded_reason is None
        and wave.client_spoiled_live is None
        and all(r.status is Status.OK for r in reqs)
    )


class SearchJudge:
    """Callable judge for ``loadgen.search.run_search``."""

    def __init__(self, threshold_tok_s: float, sql: str) -> None:
        self.threshold_tok_s = threshold_tok_s
        self.sql = sql

    @classmethod
    def compile(cls, threshold_tok_s: float) -> SearchJudge:
        return cls(threshold_tok_s, compile_search_rule({"threshold_tok_s": threshold_tok_s}))

    def judge(self, key: str, waves: Sequence[WaveRecord], confidence: float) -> LevelJudgement:
        import duckdb
        import pyarrow as pa

        rows: dict[str, list[Any]] = {"level_key": [], "trial": [], "decode_tok_s": []}
        valid = [w for w in waves if live_valid(w)]
        for w in valid:
            for r in w.requests:
                rate = live_decode_tok_s(r)
                if rate is not None:
                    rows["level_key"].append(key)
                    rows["trial"].append(w.trial)
                    rows["decode_tok_s"].append(rate)
        if not rows["decode_tok_s"]:
            return LevelJudgement(len(valid), None, None, None, "straddles", False)
        live_streams = pa.table(
            {
                **rows,
                "trial": pa.array(rows["trial"], pa.int32()),
                "confidence": pa.array([confidence] * len(rows["trial"]), pa.float64()),
            }
        )
        with duckdb.connect(":memory:") as con:
            con.register("live_streams", live_streams)
            cur = con.execute(self.sql)
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
        )

    async def __call__(
        self, key: str, waves: Sequence[WaveRecord], confidence: float
    ) -> LevelJudgement:
        return await asyncio.to_thread(self.judge, key, list(waves), confidence)
