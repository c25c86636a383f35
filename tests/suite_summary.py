"""The last lines of `make test`: when each of its parts ended and how many dbt builds and GX
validations the suite ran (each notes itself in SPARKCAP_BUILD_LOG, from every process and
pytest worker), so the suite's cost is read off every run rather than estimated.

The parts run side by side from the same start (the lint step, the client-timing tests, the
tests in parallel, and the llama-server build followed by the real-server tests), so each is
given as the second it ended at, and the whole as its own.

Each part's CPU seconds (the ``times`` of the shell that ran it, in LOGS/<part>.cpu) and each
test's (noted by tests/support/scheduling.py) are given too: on 2 saturated cores the suite's
time is its CPU, so these say where the next minute can come from.

    python tests/suite_summary.py BUILD_LOG LINT_S PARALLEL_S TIMING_S REAL_SERVER_S TOTAL_S [LOGS]
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

PARTS = {
    "lint": "lint",
    "timing": "client-timing tests",
    "twin": "twin night",
    "real-server": "llama-server build and real-server tests",
    "parallel": "tests in parallel",
}


def times_cpu_s(text: str) -> float | None:
    """The children's user + system seconds from a POSIX shell's ``times`` (its second line,
    ``0m12.5s 0m1.2s``), or None."""
    lines = text.strip().splitlines()
    found = re.findall(r"(\d+)m([\d.]+)s", lines[-1]) if len(lines) == 2 else []
    if len(found) != 2:
        return None
    return sum(int(m) * 60 + float(sec) for m, sec in found)


def parts_cpu(logs: Path) -> list[str]:
    spent = {}
    for name, words in PARTS.items():
        f = logs / f"{name}.cpu"
        cpu = times_cpu_s(f.read_text(encoding="utf-8")) if f.exists() else None
        if cpu is not None:
            spent[words] = cpu
    if not spent:
        return []
    each = " · ".join(f"{words} {cpu:.0f}" for words, cpu in spent.items())
    return [f"CPU seconds by part: {each} · {sum(spent.values()):.0f} in all"]


def summary(
    log: Path,
    lint_s: int,
    parallel_s: int,
    timing_s: int,
    real_server_s: int,
    total_s: int,
    logs: Path | None = None,
) -> list[str]:
    counts: Counter[str] = Counter()
    seconds: defaultdict[str, float] = defaultdict(float)
    cpu: defaultdict[str, float] = defaultdict(float)
    whole_by_test: Counter[str] = Counter()
    test_cpu: defaultdict[str, float] = defaultdict(float)
    own_cpu: defaultdict[str, float] = defaultdict(float)
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    for line in lines:
        try:
            note = json.loads(line)
            key = f"{note['kind']} {note['what']}"
            spent = float(note["seconds"])
        except (ValueError, KeyError, TypeError):
            note, key, spent = {}, "unreadable note", 0.0
        if key == "test cpu":
            own = float(note.get("cpu_s") or 0)
            own_cpu[str(note.get("test"))] += own
            test_cpu[str(note.get("test"))] += own + float(note.get("children_cpu_s") or 0)
            continue
        counts[key] += 1
        seconds[key] += spent
        cpu[key] += float(note.get("cpu_s") or 0)
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
    out += parts_cpu(logs) if logs is not None else []
    out.append(
        f"builds: {whole} whole dbt builds, {gx} GX validations (target: ≤ 10 together; "
        "a validation's CPU includes its dbt run)"
    )
    for key in sorted(counts):
        out.append(
            f"  {counts[key]:4d} × {key:28s} {seconds[key]:8.1f} s of work, {cpu[key]:7.1f} CPU-s"
        )
    if whole_by_test:
        out.append("the tests that run most whole builds and validations:")
        for test, n in whole_by_test.most_common(12):
            out.append(f"  {n:4d}  {test}")
    if test_cpu:
        out.append(
            f"the tests that cost most CPU, in all and in the test's own process "
            f"({sum(test_cpu.values()):.0f} CPU-s over {len(test_cpu)} tests; a child's CPU "
            "counts when it is reaped, now and then by a later test):"
        )
        for test, spent in sorted(test_cpu.items(), key=lambda kv: -kv[1])[:20]:
            out.append(f"  {spent:7.1f} {own_cpu[test]:7.1f}  {test}")
    return out


if __name__ == "__main__":
    log_arg, *times = sys.argv[1:]
    logs_dir = Path(times.pop()) if len(times) == 6 else None
    lint, parallel, timing, real_server, total = (int(t) for t in times)
    print("\n".join(summary(Path(log_arg), lint, parallel, timing, real_server, total, logs_dir)))
