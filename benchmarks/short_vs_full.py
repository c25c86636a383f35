"""Short trials against full-length waves: does a search's short trial read a level as a
full-length wave of the same server does? (issue 25)

A search judges each level from quarter-length trials (``SearchPlan.trial_share``); the figure
of record is the study's rate, (n - 1) / (t_last - t_first), of full-length streams. On a
server that sends k tokens in its first chunk (a stream interval, a buffering proxy, a
speculative decoder under one), or whose streams start and end spread out, that formula reads a
short stream differently from a long one, and a search's verdict can differ from the grid's.

For each simulated server below and each level, full-length waves (200 tokens) and short waves
(the search's trial: ``length_factor`` 0.25, 50 tokens) are measured through the capture path
a night uses (``loadgen.sweep.WaveRunner``, each wave spooled and staged as it ends), built by
dbt, and compared, all figures read from ``int_stream_rates`` and ``int_trials`` (streams of
valid waves, as the record counts them):

- full: the full-length median of the study's rate, the figure of record;
- study: the short waves' median of the same formula, as % of full, and whether its verdict
  against the threshold is full's;
- search: the short waves' median of the search's estimator (the study's rate of the
  full-length stream a short one stands in for), as % of full, and its verdict.

Speculative decoding makes every stream's rate a sample (a 50-token stream's spreads ~14 %),
so medians of the few streams a few minutes allow differ by several % by chance. Every row
gives ±2 sampling errors of its difference (bootstrap over streams). Beside each measured row,
a ``model`` row gives the simulator's own expectation: the same server's schedule in model
time (``Engine.schedule``: exact chunk sizes and send times, thousands of streams where the
streams differ), staged and built by the same dbt models, so an estimator is judged on its
bias rather than on noise. A model row of single streams has no step-time jitter: its
streams' rates sit on the lattice a whole number of decode steps makes, its median on one
point of it, and its ±2se reads 0 (the difference is then that lattice point's, still the
model's own). Only rows whose ±2 sampling errors fit inside the tolerance are judged; exit 0
when the estimator's worst |difference| over them is within TOLERANCE (1 %).

Rates are scaled as in search_vs_grid.py: threshold 40 tok/s (a night: 20 tok/s, 1000-token
outputs). Every server decodes at r(c) = 100 / (1 + 0.1043 (c - 1)) tokens a second per stream
(one decode step's tokens / step time), 39 at 16 streams: 2.5 % below the threshold, where a
short trial reading a few % fast passes a level the record fails.

    .venv/bin/python benchmarks/short_vs_full.py [--only k3,spec] [--no-chunk-usage]
                                                 [--model-streams 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import math
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from sparkcap.config.deployment import Deployment
from sparkcap.config.plan import SweepPlan
from sparkcap.loadgen.connections import StreamClients
from sparkcap.loadgen.plan import WavePlanItem
from sparkcap.loadgen.procs import ClientPool
from sparkcap.loadgen.records import (
    NO_TOKENS,
    CountSource,
    RequestRecord,
    Status,
    WaveRecord,
)
from sparkcap.loadgen.sweep import WaveRunner, client_process_count, new_run_id, wave_id
from sparkcap.loadgen.workloads import build_streams
from sparkcap.servers.sim.engine import Engine, SimProfile, SimRequest
from sparkcap.servers.sim.routes import prompt_text
from sparkcap.servers.sim.server import SimProcess
from sparkcap.store import spool
from sparkcap.store.arrow_tables import wave_tables
from sparkcap.store.connection import open_warehouse
from sparkcap.store.runs import run_end_to, run_start_to
from sparkcap.store.staging import stage_tables
from sparkcap.transform.dbt_build import build, judgement_vars

THRESHOLD = 40.0
FULL_TOKENS = 200
SHORT_FACTOR = 0.25  # SearchPlan.trial_share's default
LEVELS = (1, 4, 8, 16)
R1 = 100.0  # tok/s of one stream's decode steps
ALPHA = 0.1043  # batch slowdown per extra stream: r(16) = 39.0
TOLERANCE = 0.01
WORKLOAD = "code"
BOOTSTRAP = 400
DETERMINISTIC_MODEL_STREAMS = 32  # a server without drafts or a queue sends every stream alike


@dataclass(frozen=True)
class Case:
    name: str
    what: str
    drafts: int = 0  # speculative decoding: 1 + accepted drafts per step, geometric
    accept: float = 0.7
    stream_interval: int = 1
    prefill_tok_s: float = 1_000_000.0
    prefill_chunk: int = 2048

    @property
    def varied(self) -> bool:
        """Streams of a wave differ: drafts are drawn, or each waits its turn to prefill."""
        return self.drafts > 0 or self.prefill_tok_s < 100_000

    def profile(self) -> dict[str, Any]:
        per_step = sum(self.accept**j for j in range(self.drafts + 1))
        return {
            "model": self.name,
            "step_s1": per_step / R1,
            "batch_slowdown": ALPHA,
            "context_slowdown": 0.0,
            "draft_tokens": self.drafts,
            "acceptance_code": self.accept,
            "prompt_acceptance_spread": 0.0,
            "acceptance_noise": "geometric",
            "stream_interval_tokens": self.stream_interval,
            "prefill_tok_s": self.prefill_tok_s,
            "prefill_chunk": self.prefill_chunk,
            "prefix_cache": False,  # every prompt is prefilled: starts spread as designed
        }


CASES = (
    Case("k1", "1 token per chunk"),
    Case("k3", "stream interval 3: 3 tokens a chunk, the first included", stream_interval=3),
    Case("spec", "4 drafts, acceptance 0.7: 1-5 tokens a chunk, the first 1", drafts=4),
    Case(
        "spec-k2",
        "3 drafts under a stream interval of 2: 2-5 a chunk, the first 2 or more",
        drafts=3,
        stream_interval=2,
    ),
    Case(
        "stagger",
        "slow prefill (8,000 tok/s, 256 a step): starts and ends spread",
        prefill_tok_s=8000.0,
        prefill_chunk=256,
    ),
)


def waves_at(level: int) -> tuple[int, int]:
    """(full-length, short) waves measured at a level: a dozen short streams at least."""
    return max(2, math.ceil(4 / level)), max(3, math.ceil(12 / level))


def deployment(case: Case, endpoint: str, chunk_usage: bool) -> Deployment:
    return Deployment(
        name=case.name,
        endpoint=endpoint,
        model=case.name,
        extra_body={"ignore_eos": True},
        continuous_usage=chunk_usage,
    )


def items(level: int, step: int, n_full: int, n_short: int) -> list[WavePlanItem]:
    """A level's waves as the grid and the search ask for them: ``n_full`` full-length trials,
    then ``n_short`` of the search's short ones (distinct trial numbers, so both live in one
    run); the search's ``step`` is the level's place in LEVELS."""
    full = [WavePlanItem(level, t) for t in range(1, n_full + 1)]
    short = [
        WavePlanItem(
            level,
            n_full + t,
            length_factor=SHORT_FACTOR,
            method="search",
            search_step=step,
        )
        for t in range(1, n_short + 1)
    ]
    return full + short


async def measure(cases: Sequence[Case], endpoint: str, db: Path, chunk_usage: bool) -> None:
    """Serve every case's waves and stage each as it ends, as ``night.sweeps.run_sweeps`` does
    (the waves a search would ask for cannot be planned through it: it searches)."""
    judged = await asyncio.to_thread(judgement_vars)
    tolerances = {
        "timing_error_tolerance": float(judged["timing_error_tolerance"]),
        "start_skew_tolerance": float(judged["start_skew_tolerance"]),
    }
    run_id = new_run_id()
    deps = [deployment(c, endpoint, chunk_usage) for c in cases]
    config = {"benchmark": "short_vs_full", "profiles": [c.profile() for c in cases]}
    run_start_to(db, run_id, config, time.time_ns(), deps)

    async def on_wave(wave: WaveRecord) -> None:
        await asyncio.to_thread(spool.write_wave, wave, db)
        await asyncio.to_thread(spool.stage_spool, db, None, run_id)

    for case, dep in zip(cases, deps, strict=True):
        t0 = time.monotonic()
        plan = SweepPlan(levels=LEVELS, max_tokens=FULL_TOKENS, **tolerances)
        n_procs = client_process_count(plan)
        clients: contextlib.AbstractAsyncContextManager[StreamClients | ClientPool] = (
            ClientPool(dep, n_procs, plan.min_streams_per_process)
            if n_procs > 0
            else StreamClients(dep)
        )
        async with clients as client:
            runner = WaveRunner(
                client,
                dep,
                WORKLOAD,
                plan,
                run_id,
                on_wave=on_wave,
                progress=None,
                before_wave=None,
                after_wave=None,
                planned=0,
            )
            for step, level in enumerate(LEVELS, start=1):
                for item in items(level, step, *waves_at(level)):
                    await runner.measure(item)
        print(f"  served {case.name}: {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    run_end_to(db, run_id, "complete")


# -- the model's expectation ------------------------------------------------------------------
def model_wave(
    case: Case, profile: SimProfile, run_id: str, item: WavePlanItem, chunk_usage: bool, at_ns: int
) -> WaveRecord:
    """One wave as the simulator's schedule sends it (model time; every stream arrives at 0),
    recorded as the client would record it from those chunks."""
    tag = f"model-{case.name}-c{item.concurrency}-t{item.trial}"
    specs = build_streams(
        WORKLOAD,
        item.concurrency,
        wave_tag=tag,
        max_tokens=FULL_TOKENS,
        length_factor=item.length_factor,
        min_tokens=item.min_tokens,
    )
    reqs = [
        SimRequest(f"s{i}", prompt_text(list(s.messages)), s.max_tokens, s.temperature, 0, True, i)
        for i, s in enumerate(specs)
    ]
    sent = Engine(profile).schedule(reqs)
    wid = wave_id(run_id, case.name, WORKLOAD, item.concurrency, item.trial)
    wave = WaveRecord(
        wave_id=wid,
        run_id=run_id,
        deployment=case.name,
        model=case.name,
        endpoint="http://model.invalid/v1",
        workload=WORKLOAD,
        concurrency=item.concurrency,
        trial=item.trial,
        started_at_ns=at_ns,
        anchor_perf_ns=0,
        start_skew_ms=0.0,
        timing_error_bound=0.0,
        method=item.method,
        search_step=item.search_step,
    )
    if "length_factor" in {f.name for f in dataclasses.fields(WaveRecord)}:
        wave.length_factor = item.length_factor
    by_stream: dict[str, list[tuple[int, int, int]]] = {r.request_id: [] for r in reqs}
    for s in sent:
        if s.emit.kind == "tokens":
            n_tokens = s.emit.n_tokens if chunk_usage else NO_TOKENS
            by_stream[s.request_id].append((round(s.t_s * 1e9), n_tokens, len(s.emit.text)))
    for i, (spec, req) in enumerate(zip(specs, reqs, strict=True)):
        rec = RequestRecord(
            request_id=f"{wid}/s{i:03d}",
            stream_index=i,
            prompt_id=spec.prompt_id,
            requested_tokens=spec.max_tokens,
            required_tokens=spec.max_tokens,
            temperature=spec.temperature,
            sent_ns=0,
            headers_ns=0,
            completion_tokens=req.generated,
            prompt_tokens=req.prompt_tokens,
            cached_prompt_tokens=req.cached_tokens,
            count_source=CountSource.CONTINUOUS_USAGE if chunk_usage else CountSource.USAGE,
            finish_reason="length",
            status=Status.OK,
            saw_done=True,
        )
        for t_ns, n_tokens, n_chars in by_stream[req.request_id]:
            rec.chunks.append(t_ns, n_tokens, n_chars)
        rec.first_token_ns, rec.last_token_ns = rec.chunks.t_ns[0], rec.chunks.t_ns[-1]
        rec.end_ns = rec.last_token_ns
        wave.requests.append(rec)
    wave.duration_s = max(r.end_ns or 0 for r in wave.requests) / 1e9
    return wave


def model(cases: Sequence[Case], db: Path, chunk_usage: bool, varied_streams: int) -> None:
    """The expectation: many waves per level from the model, staged in one transaction per
    case and level (a served wave's spool is for crashes; these cannot be lost)."""
    run_id = new_run_id()
    deps = [deployment(c, "http://model.invalid/v1", chunk_usage) for c in cases]
    run_start_to(db, run_id, {"benchmark": "short_vs_full model"}, time.time_ns(), deps)
    at_ns = time.time_ns()
    for case in cases:
        t0 = time.monotonic()
        profile = SimProfile(**case.profile())
        streams = varied_streams if case.varied else DETERMINISTIC_MODEL_STREAMS
        for step, level in enumerate(LEVELS, start=1):
            n_waves = math.ceil(streams / level)
            plan = items(level, step, n_waves, n_waves)
            tables: dict[str, list[pa.Table]] = {}
            ids = []
            for item in plan:
                at_ns += 10_000_000_000
                wave = model_wave(case, profile, run_id, item, chunk_usage, at_ns)
                ids.append(wave.wave_id)
                for name, table in wave_tables(wave).items():
                    tables.setdefault(name, []).append(table)
            merged = {
                name: pa.concat_tables(parts, promote_options="permissive")
                for name, parts in tables.items()
            }
            with open_warehouse(db) as con:
                stage_tables(con, ids, merged)
        print(f"  modelled {case.name}: {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    run_end_to(db, run_id, "complete")


# -- reading and comparing ---------------------------------------------------------------------
@dataclass
class Group:
    """One case × level × length: its streams' rates (valid waves) and how its waves went."""

    study: list[float] = dataclasses.field(default_factory=list)
    estimator: list[float] = dataclasses.field(default_factory=list)
    n_waves: int = 0
    n_valid: int = 0
    reasons: set[str] = dataclasses.field(default_factory=set)
    start_spread_ms: list[float] = dataclasses.field(default_factory=list)
    end_spread_ms: list[float] = dataclasses.field(default_factory=list)


def columns(con: duckdb.DuckDBPyConnection) -> tuple[str, str | None]:
    """(study's rate, search's estimator) columns of int_stream_rates as this build has them:
    ``search_decode_tok_s`` beside ``decode_tok_s``, or ``decode_tok_s`` (the rate a level is
    judged by) beside ``measured_decode_tok_s`` (the study's formula on the stream as sent)."""
    cols = {
        str(r[0])
        for r in con.execute(
            "select column_name from information_schema.columns "
            "where table_schema = 'intermediate' and table_name = 'int_stream_rates'"
        ).fetchall()
    }
    if "search_decode_tok_s" in cols:
        return "decode_tok_s", "search_decode_tok_s"
    if "measured_decode_tok_s" in cols:
        return "measured_decode_tok_s", "decode_tok_s"
    return "decode_tok_s", None


def read(db: Path) -> tuple[dict[tuple[str, int, bool], Group], tuple[str, str | None]]:
    with duckdb.connect(str(db), read_only=True) as con:
        study_col, est_col = columns(con)
        est = f"r.{est_col}" if est_col else "null"
        rows = con.execute(
            f"""
            select t.deployment, t.concurrency, r.requested_tokens < {FULL_TOKENS} as short,
                   t.wave_id, t.is_valid, t.invalid_reasons,
                   r.{study_col}, {est}, r.first_token_ns, r.last_token_ns
            from intermediate.int_trials t
            join intermediate.int_stream_rates r using (wave_id)
            where t.trial > 0 and not t.is_superseded and r.status = 'ok'
            order by t.wave_id
            """
        ).fetchall()
    groups: dict[tuple[str, int, bool], Group] = {}
    waves: dict[str, list[tuple[int, int]]] = {}
    seen: set[str] = set()
    for dep, level, short, wid, valid, reasons, study, estimate, first_ns, last_ns in rows:
        g = groups.setdefault((str(dep), int(level), bool(short)), Group())
        if wid not in seen:
            seen.add(wid)
            g.n_waves += 1
            g.n_valid += bool(valid)
            if reasons:
                g.reasons.add(str(reasons))
            waves[wid] = []
        waves[wid].append((int(first_ns), int(last_ns)))
        if valid and study is not None:
            g.study.append(float(study))
            if estimate is not None:
                g.estimator.append(float(estimate))
        if len(waves[wid]) == level:
            starts, ends = zip(*waves[wid], strict=True)
            g.start_spread_ms.append((max(starts) - min(starts)) / 1e6)
            g.end_spread_ms.append((max(ends) - min(ends)) / 1e6)
    return groups, (study_col, est_col)


def difference(short: list[float], full: list[float]) -> tuple[float, float]:
    """median(short) / median(full) - 1, and its bootstrap standard error over streams."""
    rng = np.random.default_rng(25)
    s, f = np.asarray(short), np.asarray(full)
    diff = float(np.median(s) / np.median(f) - 1)
    boot_s = np.median(rng.choice(s, (BOOTSTRAP, s.size)), axis=1)
    boot_f = np.median(rng.choice(f, (BOOTSTRAP, f.size)), axis=1)
    return diff, float(np.std(boot_s / boot_f - 1))


def report(
    cases: Sequence[Case], sources: dict[str, dict[tuple[str, int, bool], Group]]
) -> tuple[dict[str, float], dict[str, int]]:
    """Print the table; return the worst judged |difference| per estimator and how many rows
    each had judged."""
    worst = {"study": 0.0, "search": 0.0}
    judged = {"study": 0, "search": 0}
    head = (
        f"{'case':<8}{'source':<8}{'level':>5}{'full':>8}{'n':>6}"
        f"{'study':>9}{'diff':>8}{'±2se':>7}{'agree':>6}"
        f"{'search':>9}{'diff':>8}{'±2se':>7}{'agree':>6}"
        f"{'n':>6}{'spread ms':>11}  waves valid full/short"
    )
    print(head)
    for case in cases:
        for level in LEVELS:
            for source, groups in sources.items():
                full = groups.get((case.name, level, False))
                short = groups.get((case.name, level, True))
                if full is None or short is None or not full.study or not short.study:
                    why = "; ".join(sorted((full or Group()).reasons | (short or Group()).reasons))
                    print(f"{case.name:<8}{source:<8}{level:>5}  no valid streams: {why[:90]}")
                    continue
                f_med = float(np.median(full.study))
                line = f"{case.name:<8}{source:<8}{level:>5}{f_med:>8.2f}{len(full.study):>6}"
                passes = f_med >= THRESHOLD
                for key, rates in (("study", short.study), ("search", short.estimator)):
                    if not rates:
                        line += f"{'-':>9}{'':>8}{'':>7}{'':>6}"
                        continue
                    diff, se = difference(rates, full.study)
                    agree = (float(np.median(rates)) >= THRESHOLD) == passes
                    noisy = 2 * se > TOLERANCE
                    if not noisy:
                        worst[key] = max(worst[key], abs(diff))
                        judged[key] += 1
                    line += (
                        f"{float(np.median(rates)):>9.2f}{100 * diff:>+7.2f}%"
                        f"{200 * se:>6.1f}%{'yes' if agree else 'NO':>6}"
                    )
                spread = (
                    f"{np.median(short.start_spread_ms):.0f}/{np.median(short.end_spread_ms):.0f}"
                    if short.start_spread_ms
                    else "-"
                )
                line += (
                    f"{len(short.study):>6}{spread:>11}  "
                    f"{full.n_valid}/{full.n_waves} {short.n_valid}/{short.n_waves}"
                )
                print(line)
                invalid = full.reasons | short.reasons
                if invalid and source == "served":
                    print(f"{'':<21}invalid waves: {'; '.join(sorted(invalid))[:150]}")
    return worst, judged


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated case names")
    ap.add_argument(
        "--no-chunk-usage",
        action="store_true",
        help="the servers stream no per-chunk usage (k1 from the text's share only)",
    )
    ap.add_argument(
        "--model-streams",
        type=int,
        default=2000,
        help="streams per level and length in the model rows of a server whose streams differ "
        "(drafts, staggered prefill; 0: no model rows)",
    )
    args = ap.parse_args()
    names = args.only.split(",") if args.only else None
    cases = [c for c in CASES if names is None or c.name in names]
    if not cases:
        print(f"no such case (choose from {', '.join(c.name for c in CASES)})", file=sys.stderr)
        return 2
    chunk_usage = not args.no_chunk_usage
    sources: dict[str, dict[tuple[str, int, bool], Group]] = {}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sparkcap-short-full-") as tmp:
        served_db, model_db = Path(tmp) / "served.duckdb", Path(tmp) / "model.duckdb"
        with SimProcess({"profiles": [c.profile() for c in cases]}) as sim:
            print("serving (one case at a time) ...", file=sys.stderr, flush=True)
            asyncio.run(measure(cases, sim.endpoint, served_db, chunk_usage))
        build(served_db, dbt_vars={"threshold_tok_s": THRESHOLD})
        sources["served"], (study_col, est_col) = read(served_db)
        if args.model_streams > 0:
            model(cases, model_db, chunk_usage, args.model_streams)
            build(model_db, dbt_vars={"threshold_tok_s": THRESHOLD})
            sources["model"], _ = read(model_db)
    print(
        f"threshold {THRESHOLD:g} tok/s; full-length streams {FULL_TOKENS} tokens, short "
        f"{round(SHORT_FACTOR * FULL_TOKENS)} (length_factor {SHORT_FACTOR:g}); r(c) = "
        f"{R1:g} / (1 + {ALPHA:g} (c - 1)); per-chunk usage {'on' if chunk_usage else 'off'}; "
        f"{time.monotonic() - t0:.0f} s"
    )
    print(
        f"full: median of int_stream_rates.{study_col} over full-length streams; study: the "
        f"same column over short streams; search: "
        + (f"int_stream_rates.{est_col}" if est_col else "(no estimator column in this build)")
        + "; diff vs full; ±2se: two bootstrap standard errors; spread ms: a short wave's "
        "start / end spread (median)"
    )
    for case in cases:
        print(f"  {case.name:<8} {case.what}")
    worst, judged = report(cases, sources)
    for key in ("study", "search"):
        print(
            f"worst |difference|, {key}: {100 * worst[key]:.2f} % over the {judged[key]} rows "
            f"whose ±2se < {100 * TOLERANCE:g} % (tolerance {100 * TOLERANCE:g} %)"
        )
    if est_col is None:
        print("no estimator in int_stream_rates yet: nothing to judge")
        return 1
    return 0 if judged["search"] and worst["search"] <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
