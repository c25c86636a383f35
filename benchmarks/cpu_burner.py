"""Keep N cores busy for a bounded time: the shared, noisy machine sparkcap must measure on.

    python benchmarks/cpu_burner.py --procs 1 --seconds 900 &
    make test   # or make demo: capacities must not move

Each burner is a plain busy loop in its own process (no I/O, no memory growth) and stops by
itself after ``--seconds``; SIGTERM stops all of them at once.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import signal
import time


def burn(seconds: float) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the parent's handler is for the parent
    deadline = time.monotonic() + seconds
    x = 0
    while time.monotonic() < deadline:
        for _ in range(10_000):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF


def _stop(*_: object) -> None:
    """SIGTERM (``kill``, ``kill %1``) must take the children along, not orphan them."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once is enough (pkill may repeat it)
    raise KeyboardInterrupt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=1, help="busy processes (cores to occupy)")
    ap.add_argument("--seconds", type=float, default=600.0, help="stop after this long")
    args = ap.parse_args()
    if not 1 <= args.procs <= 64 or not 0 < args.seconds <= 7200:
        ap.error("--procs must be 1..64 and --seconds 0..7200")
    signal.signal(signal.SIGTERM, _stop)
    procs = [mp.Process(target=burn, args=(args.seconds,), daemon=True) for _ in range(args.procs)]
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
