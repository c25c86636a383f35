"""How often do a slot hand-off's stamps cross, and does the overlap rule's slack absorb it?

Four 40-token streams on a simulator with two slots, beside ``--burners`` busy processes: the
second pair starts only when the first ends, so its first tokens follow the first pair's last
tokens by a few hundred microseconds of server time. A stamp can read late by as long as its
bytes sat unread; when the first pair's last stamps read after the second pair's first, the
raw windows overlap and four streams on two slots look concurrent (not queued). For each of
``--runs`` waves this prints the peak of streams decoding at once on the raw stamps and with
each window ending the wave's worst loop lag earlier (at least 1 ms, dbt's
``overlap_stamp_slack_ms``), then in how many runs the stamps crossed (a peak over 2) and
how many each reading calls not queued (the truth: every run is queued, at peak 2).

    .venv/bin/python benchmarks/handoff_overlap.py --runs 20 --burners 2
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SLACK_FLOOR_MS = 1.0  # dbt_project.yml's overlap_stamp_slack_ms


def peak(windows: list[tuple[int, int]], slack_ns: int) -> int:
    """Streams decoding at once, an end sorting before a start at one instant (dbt's rule)."""
    events: list[tuple[int, int]] = []
    for first, last in windows:
        if last - slack_ns > first:
            events += [(first, 1), (last - slack_ns, -1)]
    n = top = 0
    for _, delta in sorted(events):
        n += delta
        top = max(top, n)
    return top


def one_wave() -> tuple[int, int, float]:
    from sparkcap.config.deployment import Deployment
    from sparkcap.config.plan import SweepPlan, SweepRequest
    from sparkcap.night.sweeps import run_sweeps
    from sparkcap.servers.sim.server import SimServer
    from tests.support.sims import fast_profile

    prof = fast_profile("m", max_slots=2)  # the suite's fast engine with two slots
    db = Path(tempfile.mkdtemp(prefix="handoff-")) / "h.duckdb"
    with SimServer([prof]) as sim:
        dep = Deployment(name="m", endpoint=sim.endpoint, model="m")
        plan = SweepPlan(levels=(4,), trials=1, warmup=False, max_tokens=40, max_remeasures=0)
        result = asyncio.run(
            run_sweeps([SweepRequest(deployment=dep, workload="code", plan=plan)], db)
        )
    wave = result.waves[0]
    windows = [
        (r.first_token_ns, r.last_token_ns)
        for r in wave.requests
        if r.first_token_ns is not None and r.last_token_ns is not None
    ]
    lag_ms = wave.loop_lag_max_ms or 0.0
    slack_ns = int(1e6 * max(lag_ms, SLACK_FLOOR_MS))
    return peak(windows, 0), peak(windows, slack_ns), lag_ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--burners", type=int, default=2)
    args = parser.parse_args()
    burner = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "cpu_burner.py"), "--procs", str(args.burners),
         "--seconds", "3600"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) if args.burners else None  # fmt: skip
    raw_crossed = slack_crossed = raw_missed = slack_missed = 0
    try:
        for i in range(args.runs):
            raw, slacked, lag_ms = one_wave()
            raw_crossed += raw > 2
            slack_crossed += slacked > 2
            raw_missed += raw >= 4
            slack_missed += slacked >= 4
            print(f"run {i + 1}: peak {raw} of 4 on the raw stamps, {slacked} with the slack "
                  f"(loop lag {lag_ms:.1f} ms)")  # fmt: skip
    finally:
        if burner is not None:
            burner.terminate()
    print(
        f"stamps crossing at the hand-off (peak over 2): {raw_crossed} of {args.runs} on the raw "
        f"stamps, {slack_crossed} with the slack; not queued (a two-slot server passing as "
        f"four): {raw_missed} raw, {slack_missed} with the slack"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
