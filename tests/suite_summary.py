"""The last lines of `make test`: when each of its parts ended and how many dbt builds and GX
validations the suite ran (each notes itself in SPARKCAP_BUILD_LOG, from every process and
pytest worker), so the suite's cost is read off every run rather than estimated.

The parts run side by side from the same start (the lint step, the client-timing tests, the
tests in parallel, and the llama-server build followed by the real-server tests), so each is
given as the second it ended at, and the whole as its own.

    python tests/suite_summary.py BUILD_LOG LINT_S PARALLEL_S TIMING_S REAL_SERVER_S TOTAL_S
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path


def summary(
    log: Path, lint_s: int, parallel_s: int, timing_s: int, real_server_s: int, total_s: int
) -> list[str]:
    counts: Counter[str] = Counter()
    seconds: Counter[str] = Counter()
    whole_by_test: Counter[str] = Counter()
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    for line in lines:
        try:
            note = json.loads(line)
            key = f"{note['kind']} {note['what']}"
            spent = float(note["seconds"])
        except (ValueError, KeyError, TypeError):
            note, key, spent = {}, "unreadable note", 0.0
        counts[key] += 1
        seconds[key] += spent
        if key == "dbt build all" or key.startswith("gx "):
            whole_by_test[str(note.get("test") or "(outside a test)")] += 1
    out = [
        f"make test, side by side from one start: lint done at {lint_s} s · client-timing "
        f"tests at {timing_s} s · llama-server build and real-server tests at "
        f"{real_server_s} s · tests in parallel at {parallel_s} s · "
        f"{total_s} s in all ({total_s // 60} min {total_s % 60} s)"
    ]
    whole = counts["dbt build all"]
    gx = sum(n for k, n in counts.items() if k.startswith("gx "))
    out.append(f"builds: {whole} whole dbt builds, {gx} GX validations (target: ≤ 10 together)")
    for key in sorted(counts):
        out.append(f"  {counts[key]:4d} × {key:28s} {seconds[key]:8.1f} s of work")
    if whole_by_test:
        out.append("the tests that run most whole builds and validations:")
        for test, n in whole_by_test.most_common(12):
            out.append(f"  {n:4d}  {test}")
    return out


if __name__ == "__main__":
    log_arg, *times = sys.argv[1:]
    lint, parallel, timing, real_server, total = (int(t) for t in times)
    print("\n".join(summary(Path(log_arg), lint, parallel, timing, real_server, total)))
