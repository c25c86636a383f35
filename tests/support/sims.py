"""The simulator's quick engine, and sweeps of it through the library."""

from __future__ import annotations

import asyncio
from typing import Any

from sparkcap.config.deployment import Deployment, Timeouts
from sparkcap.config.plan import SweepPlan
from sparkcap.loadgen.records import WaveRecord
from sparkcap.loadgen.sweep import new_run_id, run_sweep
from sparkcap.servers.sim.profile import SimFaults, SimProfile


def fast_profile(model: str = "m", **kw: Any) -> SimProfile:
    """A quick engine: ~100 tok/s at one stream, so tests finish in seconds."""
    base: dict[str, Any] = dict(
        model=model, step_s1=0.02, batch_slowdown=0.1, draft_tokens=2, prefill_tok_s=50_000
    )
    base.update(kw)
    return SimProfile(**base)


def clockwork_profile(step_s: float, model: str = "m", **kw: Any) -> SimProfile:
    """An engine that gives each running stream one token every ``step_s``, whatever the batch
    or the context (no slowdown, no drafts), and prefills at once (1e9 tok/s): when each chunk
    leaves follows from the step alone. ``kw`` sets any other field, or overrides these."""
    base: dict[str, Any] = dict(
        model=model,
        step_s1=step_s,
        batch_slowdown=0.0,
        context_slowdown=0.0,
        draft_tokens=0,
        prefill_tok_s=1e9,
    )
    base.update(kw)
    return SimProfile(**base)


def linear_profile(model: str, rate_tok_s: float, batch_slowdown: float, **kw: Any) -> SimProfile:
    """An engine whose decode is ``rate_tok_s`` at one stream and slows by ``batch_slowdown``
    a stream beside it, and by nothing else (no context slowdown, no drafts, a 50,000 tok/s
    prefill): its capacity at a threshold follows from the two numbers alone."""
    base: dict[str, Any] = dict(
        model=model,
        step_s1=1 / rate_tok_s,
        batch_slowdown=batch_slowdown,
        context_slowdown=0.0,
        draft_tokens=0,
        prefill_tok_s=50_000,
    )
    base.update(kw)
    return SimProfile(**base)


def faulty(model: str, **faults: Any) -> SimProfile:
    """The quick engine with ``faults`` (``SimFaults``' fields)."""
    return fast_profile(model, faults=SimFaults(**faults))


def dep(endpoint: str, model: str = "m", **kw: Any) -> Deployment:
    """A deployment named after its model."""
    return Deployment(name=model, endpoint=endpoint, model=model, **kw)  # type: ignore[arg-type]


def sweep(
    endpoint: str,
    model: str = "m",
    workload: str = "code",
    levels: tuple[int, ...] = (2,),
    trials: int = 1,
    max_tokens: int = 20,
    warmup: bool = False,
    timeouts: Timeouts | None = None,
    max_remeasures: int = 0,
    **dep_kw: Any,
) -> list[WaveRecord]:
    """One wave per planned item unless ``max_remeasures`` says otherwise: these tests look at
    what single waves recorded, and their 0.2 s streams are too short for a 0.5 % timing
    tolerance anyway."""
    d = dep(endpoint, model, timeouts=timeouts or Timeouts(), **dep_kw)
    plan = SweepPlan(
        levels=levels,
        trials=trials,
        warmup=warmup,
        max_tokens=max_tokens,
        max_remeasures=max_remeasures,
    )
    return asyncio.run(run_sweep(d, workload, plan, new_run_id()))
