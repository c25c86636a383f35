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
