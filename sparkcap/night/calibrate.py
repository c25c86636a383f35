"""A client host's own stream budget: the largest synchronized wave it releases and stamps
within the tolerances dbt judges with, measured on the host before a night.

Why a self-test: how many streams one client times honestly depends on its cores, their load
and its network stack, so a figure measured on one machine (``host_stream_budget: 256``, the
README's 256 streams per 2-core host) is a guess on any other. The test releases waves of
growing size through the capture path a night uses (``loadgen.sweep.WaveRunner``, the same
worker processes) against the simulator, a server whose work is known and small: fixed chunks
at a constant per-stream rate, pinned to a core of its own where the host has two or more, so
what spoils a wave is the client's timing alone. Each wave is judged by dbt's client-spoiled
rule (macro ``client_spoiled_waves``: timing error bound and start skew, compiled by
``transform.live_judge.ClientSpoiledRule`` with dbt's vars as this environment sets them), the
rule a night re-measures by; the budget is the last size clean before the first one that is
not.

The budget is kept with the client processes its wave was dealt over (``loadgen.procs``: one
per core the client may use; on a 2-core host the test's client has one core, the simulator
the other). A search on this host is capped at it, never credited more than was measured: a
night's sweep that runs fewer processes than the test did gets the budget per process times
its own (:func:`streams_within`), one that runs more gets the budget as measured. On a 2-core
host the budget is therefore one core's: a floor when the server runs elsewhere, and about
right when the night's own server shares the host (as a launched llama-server does).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import statistics
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sparkcap.config.deployment import Deployment
from sparkcap.config.plan import SweepPlan
from sparkcap.errors import CalibrationError
from sparkcap.loadgen.connections import StreamClients
from sparkcap.loadgen.plan import WavePlanItem
from sparkcap.loadgen.procs import ClientPool, available_cores
from sparkcap.loadgen.records import Status, WaveRecord
from sparkcap.loadgen.sweep import (
    ClientRule,
    EndpointDown,
    WaveRunner,
    client_process_count,
    new_run_id,
)
from sparkcap.servers.sim.server import SimProcess
from sparkcap.settings import get_settings
from sparkcap.transform.dbt_build import judgement_vars
from sparkcap.transform.live_judge import ClientSpoiledRule

log = logging.getLogger(__name__)

BUDGET_FILE = "host-budget.json"
# The simulated stream: 3-token chunks at 60 tok/s (20 chunks a second per stream, the chunk
# rate of a 1-token-per-chunk server at 20 tok/s, the study's threshold) for a 2 s decode
# span, about a search trial's (50 tokens at 20 tok/s is 2.5 s). The tolerances are shares
# of the span, so a longer stream would forgive more.
CHUNK_TOKENS = 3
STREAM_TOK_S = 60.0
STREAM_TOKENS = 120
# a short warm-up before each size opens its connections, as a night's warm-up waves do
WARMUP_TOKENS = 8
FIRST_SIZE = 16
DEFAULT_MAX_STREAMS = 1024
MODEL = "calibrate"


class SizeFigures(BaseModel):
    """What the client did at one wave size (the worst of its counted waves)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    streams: int = Field(ge=1, le=1 << 20)
    waves: int = Field(ge=1, le=1 << 16)
    client_processes: int = Field(ge=1, le=256, description="processes the wave was dealt over")
    start_skew_ms: float | None
    median_decode_span_ms: float | None
    timing_error_bound: float | None
    loop_lag_p99_ms: float | None
    client_cpu_pct: float | None
    failed_streams: int = Field(ge=0, le=1 << 20)
    spoiled: str | None = Field(description="why the size is not clean; None: it is")


class HostBudget(BaseModel):
    """One host's calibration, as ``$SPARKCAP_HOME/host-budget.json`` keeps it."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    # the file is read back from disk, where anyone may have edited it: a host name holds no
    # control character (an escape sequence would reach the terminal through a warning), and
    # every count has a ceiling (400 digits of streams raised OverflowError in a division)
    host: str = Field(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f-\x9f]+$")
    cpus: int = Field(ge=1, le=1 << 16, description="CPUs this process could use when calibrating")
    client_cpus: tuple[int, ...]
    server_cpus: tuple[int, ...] = Field(description="the simulator's; empty: not pinned")
    measured_at: datetime
    timing_tolerance: float
    skew_tolerance: float
    stream_tokens: int = Field(ge=1, le=1 << 24)
    stream_tok_s: float
    sizes: tuple[SizeFigures, ...]
    budget_streams: int = Field(ge=1, le=1 << 20)
    client_processes: int = Field(ge=1, le=256, description="processes the budget's wave used")
    # False: every size up to the largest tried was clean, so the budget is a lower bound
    ceiling_found: bool

    @property
    def streams_per_process(self) -> float:
        return self.budget_streams / self.client_processes

    @property
    def date(self) -> str:
        return self.measured_at.date().isoformat()


def budget_from(sizes: Sequence[SizeFigures]) -> int:
    """The last clean size before the first that is not (0: the first is not). A clean size
    above a spoiled one does not count: the ladder stops where the client first failed."""
    budget = 0
    for s in sorted(sizes, key=lambda s: s.streams):
        if s.spoiled is not None:
            break
        budget = s.streams
    return budget


def ladder(max_streams: int, first: int = FIRST_SIZE) -> tuple[int, ...]:
    """Wave sizes to try: doubling from ``first``, and ``max_streams`` itself last."""
    sizes: list[int] = []
    n = min(first, max_streams)
    while n < max_streams:
        sizes.append(n)
        n *= 2
    return (*sizes, max_streams)


def budget_path() -> Path:
    return get_settings().work_dir / BUDGET_FILE


# -- pinning: the server off the client's cores ------------------------------------------------


def host_cpus() -> tuple[int, ...]:
    """The CPUs this process may run on."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return tuple(range(os.cpu_count() or 1))


def split_cpus(cpus: Sequence[int], server_count: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(server CPUs, client CPUs): the last ``server_count`` for the server, the rest for the
    client; on one CPU nothing can be kept apart (the server's tuple is empty)."""
    ordered = tuple(sorted(cpus))
    if len(ordered) < 2 or server_count < 1:
        return (), ordered
    k = min(server_count, len(ordered) - 1)
    return ordered[-k:], ordered[:-k]


def parse_cpus(text: str) -> tuple[int, ...]:
    """``0,2-3`` as (0, 2, 3), the way ``taskset -c`` reads a list."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise ValueError(f"CPU list {text!r}: {part!r} is not a CPU number or range") from None
        if first < 0 or last < first:
            raise ValueError(f"CPU list {text!r}: {part!r} is not an ascending range")
        cpus.update(range(first, last + 1))
    if not cpus:
        raise ValueError(f"CPU list {text!r} names no CPU")
    return tuple(sorted(cpus))


def pin(pid: int, cpus: Iterable[int]) -> bool:
    """Every thread of ``pid`` onto ``cpus`` (threads started later inherit it); False where
    the platform cannot pin. A process's own affinity call moves only the calling thread."""
    chosen = set(cpus)
    if not chosen or not hasattr(os, "sched_setaffinity"):
        return False
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        tids = [pid]
    for tid in tids:
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(tid, chosen)
    return True


@contextlib.contextmanager
def pinned(
    server_pid: int, server_cpus: Sequence[int], client_cpus: Sequence[int]
) -> Iterator[bool]:
    """The server on its CPUs and this process (and the client workers it starts inside) on
    the client's, this process's own affinity given back after. Yields whether it pinned."""
    if not server_cpus or not hasattr(os, "sched_setaffinity"):
        yield False
        return
    before = os.sched_getaffinity(0)
    ok = pin(server_pid, server_cpus) and pin(os.getpid(), client_cpus)
    try:
        yield ok
    finally:
        pin(os.getpid(), before)


# -- the self-test -----------------------------------------------------------------------------


def _profile(stream_tok_s: float) -> dict[str, Any]:
    return {
        "model": MODEL,
        "step_s1": CHUNK_TOKENS / stream_tok_s,
        "batch_slowdown": 0.0,
        "context_slowdown": 0.0,
        "fixed_chunk_tokens": CHUNK_TOKENS,
        "prefill_tok_s": 1_000_000,
        "max_slots": 4096,
    }


def judged_plan(levels: Sequence[int]) -> SweepPlan:
    """A plan holding dbt's tolerances as this environment sets them (recorded with the
    budget; the rule itself is dbt's, compiled); nothing is measured again: a spoiled wave is
    the finding."""
    judged = judgement_vars()
    return SweepPlan(
        levels=tuple(levels),
        trials=1,
        max_remeasures=0,
        timing_error_tolerance=float(judged["timing_error_tolerance"]),
        start_skew_tolerance=float(judged["start_skew_tolerance"]),
    )


def size_figures(streams: int, waves: Sequence[WaveRecord], spoiled_by: ClientRule) -> SizeFigures:
    """One size's figures and verdict: clean only if every counted wave was, all its streams
    ended as asked, and dbt's client-spoiled rule (``spoiled_by``) finds nothing."""

    def worst(values: Iterable[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return max(present) if present else None

    reasons: list[str] = []
    failed = 0
    spans: list[float] = []
    for w in waves:
        bad = [r for r in w.requests if r.status != Status.OK]
        failed += len(bad)
        if bad:
            first = bad[0]
            reasons.append(
                f"{len(bad)} of {len(w.requests)} streams failed ({first.status}"
                + (f": {first.error[:120]}" if first.error else "")
                + ")"
            )
        why = spoiled_by(w)
        if why is not None:
            reasons.append(why)
        spans += [
            (r.last_token_ns - r.first_token_ns) / 1e6
            for r in w.requests
            if r.first_token_ns is not None and r.last_token_ns is not None
        ]
    return SizeFigures(
        streams=streams,
        waves=len(waves),
        client_processes=max(1, max(len(w.client_processes) for w in waves)),
        start_skew_ms=worst(w.start_skew_ms for w in waves),
        median_decode_span_ms=statistics.median(spans) if spans else None,
        timing_error_bound=worst(w.timing_error_bound for w in waves),
        loop_lag_p99_ms=worst(w.loop_lag_p99_ms for w in waves),
        client_cpu_pct=worst(w.client_cpu_pct for w in waves),
        failed_streams=failed,
        spoiled="; ".join(dict.fromkeys(reasons)) or None,
    )


async def _ladder(
    endpoint: str,
    sizes: Sequence[int],
    plan: SweepPlan,
    spoiled_by: ClientRule,
    trials: int,
    stream_tokens: int,
) -> list[SizeFigures]:
    dep = Deployment(name="calibrate", endpoint=endpoint, model=MODEL)
    n_procs = client_process_count(plan)
    client_cm: contextlib.AbstractAsyncContextManager[StreamClients | ClientPool] = (
        ClientPool(dep, n_procs, plan.min_streams_per_process)
        if n_procs > 0
        else StreamClients(dep)
    )
    figures: list[SizeFigures] = []
    async with client_cm as client:
        runner = WaveRunner(
            client,
            dep,
            "code",
            plan,
            new_run_id(),
            on_wave=None,
            progress=None,
            before_wave=None,
            after_wave=None,
            planned=len(sizes) * (trials + 1),
        )
        for n in sizes:
            try:
                await runner.measure(WavePlanItem(n, 0, max_tokens=WARMUP_TOKENS))
                waves = [
                    await runner.measure(WavePlanItem(n, t, max_tokens=stream_tokens))
                    for t in range(1, trials + 1)
                ]
            except EndpointDown as exc:
                raise CalibrationError(f"the simulator stopped answering: {exc}") from None
            figures.append(size_figures(n, waves, spoiled_by))
            if figures[-1].spoiled is not None:
                break  # the first size the client could not time ends the ladder
    return figures


def calibrate(
    *,
    max_streams: int = DEFAULT_MAX_STREAMS,
    trials: int = 1,
    sizes: Sequence[int] | None = None,
    stream_tokens: int = STREAM_TOKENS,
    stream_tok_s: float = STREAM_TOK_S,
    path: Path | None = None,
) -> HostBudget:
    """Run the self-test and write its result to ``path`` (``$SPARKCAP_HOME/host-budget.json``).

    The simulator gets one CPU of its own (it is one Python process: more would not help it)
    and the client every other CPU this process may use, as the night's client would use
    them. A host with one CPU is measured unpinned, and the file says so.
    """
    if not 1 <= max_streams <= 4096:
        raise CalibrationError(f"max streams must be between 1 and 4096, got {max_streams}")
    if not 1 <= trials <= 5:
        raise CalibrationError(f"trials must be between 1 and 5, got {trials}")
    tried = tuple(sorted(set(sizes))) if sizes else ladder(max_streams)
    plan = judged_plan(tried)
    spoiled_by = ClientSpoiledRule.compile()
    server_cpus, client_cpus = split_cpus(host_cpus(), 1)
    with (
        SimProcess({"profiles": [_profile(stream_tok_s)]}) as sim,
        pinned(sim.proc.pid, server_cpus, client_cpus) as ok,
    ):
        if not ok:
            server_cpus, client_cpus = (), host_cpus()
        figures = asyncio.run(_ladder(sim.endpoint, tried, plan, spoiled_by, trials, stream_tokens))
    budget = budget_from(figures)
    if budget == 0:
        first = figures[0]
        raise CalibrationError(
            f"this host timed no wave within the tolerances: {first.streams} streams: "
            f"{first.spoiled} (no budget written; an earlier {budget_path().name} is unchanged)"
        )
    at_budget = next(s for s in figures if s.streams == budget)
    result = HostBudget(
        host=get_settings().client_host,
        cpus=len(host_cpus()),
        client_cpus=client_cpus,
        server_cpus=server_cpus,
        measured_at=datetime.now(UTC),
        timing_tolerance=plan.timing_error_tolerance,
        skew_tolerance=plan.start_skew_tolerance,
        stream_tokens=stream_tokens,
        stream_tok_s=stream_tok_s,
        sizes=tuple(figures),
        budget_streams=budget,
        client_processes=at_budget.client_processes,
        ceiling_found=any(s.spoiled is not None for s in figures),
    )
    write_budget(result, path or budget_path())
    return result


def write_budget(budget: HostBudget, path: Path) -> None:
    """Atomically: a night reading the file never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(budget.model_dump_json(indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_budget(path: Path | None = None, host: str | None = None) -> HostBudget | None:
    """This host's calibration, or ``None`` where there is none for it (no file, or one made
    on another host or with another CPU count, which is said once and not applied)."""
    path = path or budget_path()
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CalibrationError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        budget = HostBudget.model_validate(json.loads(raw))
    except (ValueError, ValidationError):
        raise CalibrationError(
            f"{path} is not a host budget sparkcap calibrate wrote: run it again, or delete "
            "the file"
        ) from None
    here = host or get_settings().client_host
    if budget.host != here:
        log.warning(
            "warning: %s was calibrated on host %s, not this one (%s): not applied",
            path,
            budget.host,
            here,
        )
        return None
    if budget.cpus != len(host_cpus()):
        log.warning(
            "warning: %s was calibrated with %d CPUs, this process may use %d: not applied "
            "(run sparkcap calibrate again)",
            path,
            budget.cpus,
            len(host_cpus()),
        )
        return None
    return budget


# -- what a budget does to a plan --------------------------------------------------------------


def streams_within(budget: HostBudget, plan: SweepPlan, cores: int | None = None) -> int:
    """The most streams one wave of ``plan`` may hold on this host: the budget per process
    times the processes the sweep deals a wave over (``loadgen.procs``: one per core, or
    ``client_processes``), but at most as many processes as the self-test measured: a process
    it did not run is not credited. A process takes a share only of a wave of at least
    ``min_streams_per_process`` per process, so a budget below that per process is one
    process's."""
    processes = max(1, plan.client_processes or (cores or available_cores()))
    processes = min(processes, budget.client_processes)
    per_process = budget.streams_per_process
    if per_process < plan.min_streams_per_process:
        processes = 1
    return max(1, math.floor(per_process * processes))


def plan_within_budget(
    plan: SweepPlan, budget: HostBudget | None, cores: int | None = None
) -> tuple[SweepPlan, str | None]:
    """``plan`` as this host can time it, and the line that says what changed (``None``:
    nothing to say). A search above the budget is capped there, since every level it would
    try beyond is one whose waves the client itself spoils; a grid is measured as planned,
    its levels above the budget named."""
    if budget is None:
        return plan, None
    cap = streams_within(budget, plan, cores)
    procs = budget.client_processes
    source = (
        f"this host's calibrated budget (sparkcap calibrate, {budget.date}: "
        f"{budget.budget_streams} streams over {procs} client process{'es' if procs > 1 else ''})"
    )
    if plan.search is not None:
        if plan.search.max_level <= cap:
            return plan, None
        search = plan.search.model_copy(update={"max_level": cap})
        capped = plan.model_copy(update={"search": search})
        return capped, f"search capped at {cap} streams: {source}"
    above = [lv for lv in plan.levels if lv > cap]
    if not above:
        return plan, None
    names = ", ".join(str(lv) for lv in above)
    return plan, (
        f"warning: grid level{'s' if len(above) > 1 else ''} {names} above {cap} streams, "
        f"{source}: measured as planned; expect client-spoiled waves there"
    )


# -- wording -----------------------------------------------------------------------------------


def budget_lines(budget: HostBudget, path: Path | None = None) -> list[str]:
    """The table ``sparkcap calibrate`` prints, then the budget."""

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.3f}"

    def cpu_list(cpus: Sequence[int]) -> str:
        return ",".join(str(c) for c in cpus) or "-"

    pinning = (
        f"simulator on CPU {cpu_list(budget.server_cpus)}, client on CPU "
        f"{cpu_list(budget.client_cpus)}"
        if budget.server_cpus
        else f"not pinned (client and simulator share CPU {cpu_list(budget.client_cpus)})"
    )
    lines = [
        f"host {budget.host}: {budget.cpus} CPUs; {pinning}; {budget.stream_tokens}-token "
        f"streams at {budget.stream_tok_s:g} tok/s in {CHUNK_TOKENS}-token chunks",
        f"tolerances (dbt vars): timing error bound {100 * budget.timing_tolerance:.2f} %, "
        f"start skew {100 * budget.skew_tolerance:.0f} % of the median decode span",
        f"{'streams':>7} {'procs':>5} {'skew ms':>8} {'span ms':>8} {'bound %':>8} "
        f"{'lag p99 ms':>10} {'CPU %':>6}  verdict",
    ]
    for s in budget.sizes:
        cpu = "-" if s.client_cpu_pct is None else f"{s.client_cpu_pct:.0f}"
        lines.append(
            f"{s.streams:>7} {s.client_processes:>5} {ms(s.start_skew_ms):>8} "
            f"{ms(s.median_decode_span_ms):>8} {pct(s.timing_error_bound):>8} "
            f"{ms(s.loop_lag_p99_ms):>10} {cpu:>6}  {s.spoiled or 'clean'}"
        )
    bound = "" if budget.ceiling_found else " (every size tried was clean: a lower bound)"
    lines.append(
        f"budget: {budget.budget_streams} streams over {budget.client_processes} client "
        f"process{'es' if budget.client_processes > 1 else ''} "
        f"({budget.streams_per_process:g} per process){bound}"
    )
    if path is not None:
        lines.append(f"written to {path}: a search on this host is capped at it")
    return lines
