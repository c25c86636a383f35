"""Does sparkcap's recorded decode rate match what the server actually did?

Starts the simulator in its own process with fixed 3-token chunks, sweeps 1, 16 and 64
streams, and compares each stream's rate as sparkcap recorded it (client arrival times, token
count from usage) with the rate from the simulator's own log (its send times). Prints the
relative error per level and the client's event-loop lag. Target: |error| < 1 % at every level.

    .venv/bin/python benchmarks/rate_accuracy.py [--tokens 300]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys

import httpx

from sparkcap.config.deployment import Deployment
from sparkcap.config.plan import SweepPlan
from sparkcap.loadgen.sweep import new_run_id, run_sweep
from sparkcap.night.progress import live_decode_tok_s
from sparkcap.servers.sim.server import SimProcess

PROFILE = {
    "model": "bench",
    "step_s1": 0.03,
    "batch_slowdown": 0.02,
    "fixed_chunk_tokens": 3,
    "prefill_tok_s": 100000,
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--levels", default="1,16,64")
    args = ap.parse_args()
    levels = tuple(int(x) for x in args.levels.split(","))
    with SimProcess({"profiles": [PROFILE]}) as sim:
        dep = Deployment(name="bench", endpoint=sim.endpoint, model="bench")  # type: ignore[arg-type]
        plan = SweepPlan(levels=levels, trials=1, warmup=True, max_tokens=args.tokens)
        waves = asyncio.run(run_sweep(dep, "code", plan, new_run_id()))
        log = {e["request_id"]: e for e in httpx.get(sim.base_url + "/sim/log").json()}
    worst = 0.0
    print(
        f"{'streams':>7} {'median err %':>12} {'max |err| %':>11} {'client tok/s':>12} "
        f"{'server tok/s':>12} {'loop lag p99 ms':>15} {'client CPU %':>12} {'bound %':>9}"
    )
    for w in waves:
        if w.trial == 0:
            continue
        errs, client, server = [], [], []
        for r in w.requests:
            s = log[r.request_id]
            rate = live_decode_tok_s(r)
            if rate is None or s["decode_tok_s"] is None:
                print(f"stream {r.request_id} has no rate: {r.status} {r.error}")
                return 1
            if r.completion_tokens != s["completion_tokens"]:
                print(f"token count mismatch on {r.request_id}")
                return 1
            errs.append((rate - s["decode_tok_s"]) / s["decode_tok_s"] * 100)
            client.append(rate)
            server.append(s["decode_tok_s"])
        mx = max(abs(e) for e in errs)
        worst = max(worst, mx)
        print(
            f"{w.concurrency:>7} {statistics.median(errs):>12.3f} {mx:>11.3f} "
            f"{statistics.median(client):>12.2f} {statistics.median(server):>12.2f} "
            f"{w.loop_lag_p99_ms or 0:>15.2f} {w.client_cpu_pct or 0:>12.1f} "
            f"{100 * (w.timing_error_bound or 0):>9.3f}"
        )
    verdict = "PASS" if worst < 1.0 else "FAIL"
    print(f"worst per-stream |error| {worst:.3f} % (target < 1 %): {verdict}")
    return 0 if worst < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
