"""Open-loop replay: requests that arrive on their own schedule, not when the last one ended.

Every capacity sparkcap reports comes from synchronized, closed-loop waves: the study's
protocol, and a burst worst case. Real users arrive independently. A replay sends seeded
Poisson arrivals of code and prose requests (and long prompts) at one deployment for a stated
duration, and stamps each request's *scheduled* start beside its actual send. A client that
falls behind (a stalled loop, a slow connection pool) then records late requests, whose wait
counts from when they were due; a client that timed from its own sends would hide the stall
(coordinated omission).

The rates are the plan's (``marts.fct_replay_plan``, Little's law in dbt); this module only
keeps the schedule and records what happened. dbt judges it (``marts.fct_replay``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import secrets
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from sparkcap.config.deployment import Deployment
from sparkcap.config.probes import ReplayOptions
from sparkcap.loadgen.connections import make_client
from sparkcap.loadgen.probes import _Probe, _spec, document
from sparkcap.loadgen.records import ReplayOffer, RequestRecord, WaveRecord
from sparkcap.loadgen.wave import LoopMonitor, stream_timing_error
from sparkcap.loadgen.workloads import StreamSpec, build_streams

_NS = 1_000_000_000

# The replays of one `sparkcap replay` (one replay_id) that have made their deliberate stall, per
# event loop. Its deployments share the client's loop: the stall is the client's, made once,
# and every deployment's requests wait it out. Each making its own blocked the loop once per
# deployment (three twin deployments: 4.4 s late sends for a stated 1.5 s stall).
_STALLED: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, set[str]] = (
    weakref.WeakKeyDictionary()
)


@dataclass(frozen=True, slots=True)
class Arrival:
    at_s: float  # scheduled start, seconds from the replay's anchor
    role: str  # code | prose | long
    index: int  # the n-th arrival of its role


def poisson_arrivals(rates_per_s: dict[str, float], duration_s: float, seed: int) -> list[Arrival]:
    """Independent Poisson processes, one per role, merged in time order, each conditioned on
    its expected count: round(rate × duration) instants drawn uniformly over the duration
    (given its count, a Poisson process's instants are exactly that). The bursts and gaps are
    Poisson's; the offered load is the plan's, not one draw's luck (over 20 s at 4.5 a second,
    one seed offered 20 % more than another, and a replay at the planned rate judged a load the
    plan never asked for). Each role draws from its own seeded generator, so one role's rate
    leaves the others' instants alone."""
    out: list[Arrival] = []
    for role, rate in sorted(rates_per_s.items()):
        n = round(rate * duration_s) if rate > 0 else 0
        rng = random.Random(f"{seed}:{role}")
        instants = sorted(rng.uniform(0.0, duration_s) for _ in range(n))
        out.extend(Arrival(t, role, i) for i, t in enumerate(instants))
    out.sort(key=lambda a: (a.at_s, a.role, a.index))
    return out


def _offer(options: ReplayOptions) -> ReplayOffer:
    """The options a replay stores beside what it observed: the offer's own fields."""
    names = {f.name for f in dataclasses.fields(ReplayOffer)}
    return ReplayOffer(**options.model_dump(include=names))


# a replay's request may outlast the schedule by this much (or the schedule's own length, if
# longer): a stream that never ends fails by it, named, instead of holding the replay open for
# the deployment's whole request timeout
REPLAY_MARGIN_S = 60.0


def request_limit_s(dep: Deployment, options: ReplayOptions) -> float:
    """The longest a replay's request may take: the schedule plus a margin, at most the
    deployment's own request timeout."""
    return min(dep.timeouts.total_s, options.duration_s + max(REPLAY_MARGIN_S, options.duration_s))


def _tag(options: ReplayOptions) -> str:
    # two replays of one run never share a wave id (staging replaces by wave)
    return f"x{options.rate_factor:g}-s{options.seed}-{options.replay_id or secrets.token_hex(3)}"


def not_replayed(
    deployment: str, model: str, run_id: str, options: ReplayOptions, reason: str
) -> WaveRecord:
    """A planned deployment's replay that never ran (its server down, its preflight refused):
    a replay wave with no requests whose offer carries the reason, so the fleet's verdict
    counts it (never holds) and names it, where leaving it out would let the rest hold."""
    wave = WaveRecord(
        wave_id=f"{run_id}/{deployment}/replay-{_tag(options)}/not-replayed",
        run_id=run_id,
        deployment=deployment,
        model=model,
        endpoint="",
        workload="mixed",
        concurrency=max(1, round(options.planned_streams)),
        trial=1,
        started_at_ns=time.time_ns(),
        anchor_perf_ns=time.perf_counter_ns(),
    )
    wave.probe = "replay"
    wave.replay_offer = dataclasses.replace(_offer(options), not_replayed_reason=reason)
    return wave


async def replay(
    dep: Deployment,
    run_id: str,
    options: ReplayOptions,
    on_interrupt: Callable[[WaveRecord], None] | None = None,
) -> WaveRecord:
    """One replay at ``dep``: a wave (probe ``replay``) whose requests carry their scheduled
    starts. Roles: ``code``, ``prose``, ``long``. Every request is sent once, on schedule or
    as soon after as the client can; none is retried and none dropped. Cancelled, it hands
    what it sent to ``on_interrupt`` (its offer saying it was interrupted) and stops."""
    rates = {
        "code": options.code_per_s * options.rate_factor,
        "prose": options.prose_per_s * options.rate_factor,
        "long": options.long_per_min * options.rate_factor / 60.0,
    }
    arrivals = poisson_arrivals(rates, options.duration_s, options.seed)
    p = _Probe(
        dep, run_id, f"replay-{_tag(options)}", "mixed", max(1, round(options.planned_streams))
    )
    p.wave.probe = "replay"
    p.wave.replay_offer = _offer(options)
    n_role = {r: sum(a.role == r for a in arrivals) for r in ("code", "prose")}
    specs: dict[str, list[StreamSpec]] = {
        "code": build_streams(
            "code", max(1, n_role["code"]), f"{run_id[-6:]}-rp", options.code_tokens
        ),
        "prose": build_streams(
            "prose", max(1, n_role["prose"]), f"{run_id[-6:]}-rp", options.prose_tokens
        ),
    }
    # a request on the wire at every instant of the replay, and then some: a pool smaller
    # than the arrivals in flight would queue sends inside the client and hide it
    pool = max(16, 4 * round(options.planned_streams * options.rate_factor) + 16)
    monitor = LoopMonitor()
    tasks: list[asyncio.Task[RequestRecord]] = []
    try:
        async with make_client(dep, pool) as client:
            long_text = ""
            if rates["long"] > 0:
                long_text, _ = await document(
                    client, dep, options.long_prompt_tokens, secrets.token_hex(6)
                )
            # the anchor is now: the schedule's zero, after the long document was prepared
            p.wave.started_at_ns = time.time_ns()
            p.wave.anchor_perf_ns = anchor = time.perf_counter_ns()
            monitor.start()
            stalled = options.client_stall_s <= 0
            limit_s = request_limit_s(dep, options)
            for a in arrivals:
                due_ns = anchor + round(a.at_s * _NS)
                if not stalled and a.at_s >= options.client_stall_at_s:
                    # the deliberate stall: the loop itself blocks, as a busy client's does
                    stall_ns = anchor + round(options.client_stall_at_s * _NS)
                    await asyncio.sleep(max(0.0, (stall_ns - time.perf_counter_ns()) / _NS))
                    made = _STALLED.setdefault(asyncio.get_running_loop(), set())
                    if options.replay_id not in made:  # (a replay without an id stalls alone)
                        if options.replay_id is not None:
                            made.add(options.replay_id)
                        time.sleep(options.client_stall_s)
                    stalled = True
                wait_s = (due_ns - time.perf_counter_ns()) / _NS
                if wait_s > 0:
                    await asyncio.sleep(wait_s)
                if a.role == "long":
                    spec = _spec(
                        f"long-{a.index}",
                        f"[{secrets.token_hex(4)}] " + long_text + "\nSummarise in one line.",
                        4,
                    )
                else:
                    spec = specs[a.role][a.index % len(specs[a.role])]
                tasks.append(
                    asyncio.create_task(
                        p.send(client, spec, a.role, scheduled_ns=due_ns - anchor, total_s=limit_s)
                    )
                )
            await asyncio.gather(*tasks)
            await monitor.stop()
    except asyncio.CancelledError:
        # interrupted (Ctrl-C): what was sent is kept, marked so that no verdict reads a
        # schedule cut short; the caller spools it before the interruption goes on
        for t in tasks:
            t.cancel()
        if on_interrupt is not None:
            ran_s = (time.perf_counter_ns() - p.wave.anchor_perf_ns) / _NS
            p.wave.replay_offer = dataclasses.replace(
                p.wave.replay_offer or _offer(options),
                not_replayed_reason=f"interrupted {ran_s:.0f} s into its "
                f"{options.duration_s:g} s schedule: what it sent is kept, judged by no verdict",
            )
            on_interrupt(p.finish(monitor))
        raise
    # each stream's own bound: dbt leaves a stream whose rate a stall may have moved out of the
    # figures, and gives no verdict when too many were (int_replay_streams, fct_replay)
    for r in p.wave.requests:
        r.timing_error_bound = stream_timing_error(r, monitor, anchor)
    return p.finish(monitor)
