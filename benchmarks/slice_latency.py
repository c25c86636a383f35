"""How late does a busy machine make a burst of client work, at each niceness?

A capturing client is mostly idle, then busy for a few ms while a wave's chunks arrive; what
spoils its timing is not waking late (the scheduler favours wakers) but a burst cut into
slices shared with every busy task. This probe does 4 ms of CPU work, sleeps 6 ms, again and
again for ``--seconds``, beside ``--burners`` busy processes, at each niceness given, and
prints how much wall time each burst took beyond its 4 ms. ``make test`` runs the timing tests
at ``TIMING_NICE``; this is the figure that chose it.

    sudo .venv/bin/python benchmarks/slice_latency.py --burners 8 --nice 0 -5 -15 -20
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BURST_MS, SLEEP_S = 4.0, 0.006


def probe(seconds: float) -> list[float]:
    """Extra wall ms per burst, in this process (run at the niceness under test)."""
    extra = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        done = time.thread_time() + BURST_MS / 1e3
        while time.thread_time() < done:
            pass
        extra.append((time.monotonic() - started) * 1e3 - BURST_MS)
        time.sleep(SLEEP_S)
    return sorted(extra)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--burners", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10.0, help="per niceness")
    ap.add_argument("--nice", type=int, nargs="+", default=[0, -5, -15])
    ap.add_argument("--probe", type=float, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.probe is not None:  # the child: one niceness, figures on stdout
        extra = probe(args.probe)
        p50, p99 = extra[len(extra) // 2], extra[int(len(extra) * 0.99)]
        print(f"{len(extra)} {p50:.2f} {p99:.2f} {extra[-1]:.2f}")
        return 0
    if not 0 <= args.burners <= 64 or not 0 < args.seconds <= 600:
        ap.error("--burners must be 0..64 and --seconds 0..600")
    burner = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "cpu_burner.py"),
         "--procs", str(args.burners), "--seconds", str(args.seconds * len(args.nice) + 30)]
    ) if args.burners else None  # fmt: skip
    try:
        time.sleep(1)
        print(f"beside {args.burners} busy processes on {os.cpu_count()} cores, "
              f"{BURST_MS:g} ms bursts: extra wall ms per burst")  # fmt: skip
        print(f"{'nice':>5} {'bursts':>7} {'p50':>7} {'p99':>7} {'max':>7}")
        for nice in args.nice:
            out = subprocess.run(
                ["nice", "-n", str(nice), sys.executable, __file__, "--probe", str(args.seconds)],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if out.returncode != 0 or not out.stdout.strip():
                print(f"{nice:>5} failed: {out.stderr.strip()[-200:]}")
                continue
            n, p50, p99, worst = out.stdout.split()
            note = "  (nice could not raise priority: not root?)" if "nice:" in out.stderr else ""
            print(f"{nice:>5} {n:>7} {p50:>7} {p99:>7} {worst:>7}{note}")
    finally:
        if burner is not None:
            burner.terminate()
            burner.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
