"""Keep N cores busy for a bounded time: the shared, noisy machine sparkcap must measure on.

    python benchmarks/cpu_burner.py --procs 1 --seconds 900 &
    make test   # or make demo: capacities must not move

Each burner is a plain busy loop in its own process (no I/O, no memory growth) and stops by
itself after ``--seconds``; SIGTERM stops all of them at once.

``--busy-s B --idle-s I`` makes each burner bursty: busy for 0.5-1.5 B s, then idle for
0.5-1.5 I s, from a random phase. Started under ``nice -n -15`` it takes the cores the way
``make test``'s timing phase and twin night do (a few seconds at a time, ahead of everything at
niceness 0), which a steady burner at 0 never does: the parallel tests' process is starved for
seconds, then runs freely, so a baseline measured just after a starved stretch sees no load.

    nice -n -15 python benchmarks/cpu_burner.py --procs 2 --busy-s 4 --idle-s 4 --seconds 1800 &
    pytest -n 3 -m "not e2e and not client_timing and not real_server"
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import signal
import time


def burn(seconds: float, busy_s: float = 0.0, idle_s: float = 0.0) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the parent's handler is for the parent
    deadline = time.monotonic() + seconds
    rng = random.Random()
    if idle_s > 0:
        time.sleep(rng.uniform(0.0, busy_s + idle_s))  # burners out of phase with each other
    x = 0
    while time.monotonic() < deadline:
        stop = time.monotonic() + rng.uniform(0.5, 1.5) * busy_s if idle_s > 0 else deadline
        while time.monotonic() < min(stop, deadline):
            for _ in range(10_000):
                x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        if idle_s > 0:
            time.sleep(rng.uniform(0.5, 1.5) * idle_s)


def _stop(*_: object) -> None:
    """SIGTERM (``kill``, ``kill %1``) must take the children along, not orphan them."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once is enough (pkill may repeat it)
    raise KeyboardInterrupt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=1, help="busy processes (cores to occupy)")
    ap.add_argument("--seconds", type=float, default=600.0, help="stop after this long")
    ap.add_argument("--busy-s", type=float, default=0.0, help="bursty: mean busy stretch")
    ap.add_argument("--idle-s", type=float, default=0.0, help="bursty: mean idle stretch")
    args = ap.parse_args()
    if not 1 <= args.procs <= 64 or not 0 < args.seconds <= 7200:
        ap.error("--procs must be 1..64 and --seconds 0..7200")
    bursts_ok = all(0 <= s <= 600 for s in (args.busy_s, args.idle_s))  # NaN and inf too
    if not bursts_ok or (args.busy_s > 0) != (args.idle_s > 0):
        ap.error("--busy-s and --idle-s go together, each 0..600 s")
    signal.signal(signal.SIGTERM, _stop)
    procs = [
        mp.Process(target=burn, args=(args.seconds, args.busy_s, args.idle_s), daemon=True)
        for _ in range(args.procs)
    ]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join()
    except KeyboardInterrupt:
        pass
    finally:
        for p in procs:
            p.terminate()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
