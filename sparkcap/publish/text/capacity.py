"""The words for a capacity, once for the CLI, the night's gaps, the report and the Prefect
artifact: a deployment × workload's verdict, what limits it, its sessions' cache, the fleet's
capacity, and a live search step decided otherwise than the record."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sparkcap.publish.text.console import visible

if TYPE_CHECKING:
    from sparkcap.publish.marts import (
        BottleneckRow,
        CapacityRow,
        FleetRow,
        SearchDisagreement,
        SessionCacheRow,
    )


def search_disagreement_words(d: SearchDisagreement) -> str:
    """The line a sweep prints at once where its live search decided a step otherwise than
    the record: the user learns that the path taken is not the one of record, and why."""
    why = "; ".join(x for x in (d.verdict_reason, d.invalid_reasons) if x)
    return (
        f"note: {d.deployment}/{d.workload} search {d.kind} at {d.concurrency} streams was "
        f"decided live as {d.live_verdict or 'undecided'}; the record says {d.verdict}"
        + (f" ({why})" if why else "")
    )


def capacity_words(c: CapacityRow, *, failing: bool = False) -> str:
    """A deployment × workload's capacity as every reader words it: ``dep/wl: verdict``, the
    verdict being the mart's (a pair that measured nothing reads "no valid measurement at level
    N: why", never "below the threshold" or a bare 0). ``failing``: the line a sweep or night
    ends on, which says first that such a pair measured nothing."""
    pair = f"{c.deployment}/{c.workload}"
    if failing and not c.is_measured:
        return f"{pair} measured nothing: {c.capacity_verdict}"
    return f"{pair}: {c.capacity_verdict}"


def capacity_line(c: CapacityRow) -> str:
    return f"capacity at {c.threshold_tok_s:g} tok/s — {capacity_words(c)}"


BOTTLENECK_WORDS = {
    "client": "the client",
    "link": "a link",
    "kv-cache": "KV-cache capacity (preemption)",
    "request-slots": "request slots (queueing)",
    "batch-buckets": "batch-size buckets (a dip)",
    "prefill": "prefill interference",
    "memory-bandwidth": "memory bandwidth",
}


def bottleneck_line(b: BottleneckRow) -> str | None:
    """The line printed under a capacity: what limits it, how sure, on what evidence, and
    the advice the evidence supports; None where the capacity's own words say it all (not
    reached, not measured)."""
    if b.bottleneck in ("not reached", "not measured"):
        return None
    pair = f"{b.deployment}/{b.workload}"
    if b.bottleneck == "unknown":
        line = f"  why {pair}: unknown — no signal at {b.limit_level} streams decides"
    else:
        what = BOTTLENECK_WORDS.get(b.bottleneck, b.bottleneck)
        if b.is_confirmed is False:
            # only a setting points here: the mart's evidence reads "consistent with …"
            what += ", unconfirmed"
        line = f"  why {pair}: {what} ({b.confidence}) — {b.evidence}"
        if b.advice:
            line += f"; advice: {b.advice}"
    if b.bound_flags:
        line += f"; check: {b.bound_flags}"
    if b.overruled_evidence:
        line += f"; overruled by the measurements: {b.overruled_evidence}"
    return visible(line)


def session_cache_lines(rows: Sequence[SessionCacheRow]) -> list[str]:
    """One line per deployment's agent waves: the cache state they found (and the reset's
    verdict), then one line per wave whose cache was not what its plan assumed."""
    out: list[str] = []
    by_dep: dict[str, list[SessionCacheRow]] = {}
    for r in rows:
        by_dep.setdefault(r.deployment, []).append(r)
    for dep, waves in by_dep.items():
        states = sorted({w.cache_state or "nothing to judge" for w in waves})
        resets = sorted({w.reset_verdict for w in waves if w.reset_verdict})
        line = f"  sessions' cache {dep}/agent: {', '.join(states)} over {len(waves)} wave(s)"
        if resets:
            line += f"; cache reset: {', '.join(resets)}"
        out.append(visible(line))
        out.extend(
            visible(
                f"  flagged {dep}/agent {w.concurrent_sessions} session(s) trial {w.trial}: "
                f"{w.flag_reason}"
            )
            for w in waves
            if w.is_flagged
        )
    return out


def fleet_headline(workloads: Sequence[tuple[str, int]]) -> str:
    """The measured workloads' fleet capacities as the report's headline and its chart say
    them, "≈ 28 code streams or ≈ 11 prose streams" (agent levels count sessions): alternative
    workloads, never a sum. A workload no deployment measured is named apart by the caller."""
    return " or ".join(
        f"≈ {n} {'agent sessions' if w == 'agent' else f'{w} streams'}" for w, n in workloads
    )


def fleet_line(f: FleetRow) -> str:
    """The fleet's capacity for a workload, with what it rests on: replicas counted from one
    measured replica, deployments that measured nothing (the sum is then partial)."""
    head = f"fleet capacity at {f.threshold_tok_s:g} tok/s — {f.workload}: "
    if f.n_measured_deployments == 0:
        # nothing measured is never printed as a capacity of 0
        return head + f"not measured ({f.not_measured_deployments or 'no deployment measured'})"
    note = ""
    if f.extrapolated_deployments:
        note += f" (replicas extrapolated: {f.extrapolated_deployments})"
    if f.not_measured_deployments:
        note += f" (partial: {f.not_measured_deployments} not measured)"
    # streams keep their plural (scripts parse "N streams"); sessions are new: worded right
    unit = (
        ("session" if f.capacity_streams == 1 else "sessions")
        if f.workload == "agent"
        else "streams"
    )
    return head + f"{f.capacity_streams} {unit}{note}"
