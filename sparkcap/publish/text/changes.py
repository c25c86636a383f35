"""A night's changes against its baseline and a comparison's regressions, as lines."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sparkcap.publish.text.console import visible

if TYPE_CHECKING:
    from sparkcap.publish.compare import Regression
    from sparkcap.publish.marts import ChangeRow


def change_subject_words(ch: ChangeRow) -> str:
    if ch.subject == "level" and ch.concurrency is not None:
        return f"rate at {ch.concurrency} streams"
    return ch.subject


def change_line(ch: ChangeRow) -> str:
    """A flagged change as a night prints it under its capacities: the pair and what
    changed, its size against the baseline, the test's p-value, and what else changed that
    night (the likely cause) as ``fct_changes`` words it; the verdict is the mart's."""
    size = "" if ch.change_pct is None else f" {ch.change_pct:+.1f} %"
    facts = [] if ch.p_value is None else [f"p {ch.p_value:.2g}"]
    if ch.baseline_value is not None:
        band = ""
        if ch.baseline_low is not None and ch.baseline_high is not None:
            band = f" [{ch.baseline_low:.4g}, {ch.baseline_high:.4g}]"
        runs = "" if ch.n_baseline_runs is None else f" of {ch.n_baseline_runs} runs"
        facts.append(f"baseline {ch.baseline_value:.4g}{band}{runs}")
    line = f"change vs baseline — {ch.deployment}/{ch.workload} {change_subject_words(ch)}:{size}"
    if facts:
        line += f" ({'; '.join(facts)})"
    if ch.verdict:
        line += f" — {ch.verdict}"
    if ch.what_else_changed and ch.what_else_changed not in (ch.verdict or ""):
        line += f"; also changed: {ch.what_else_changed}"  # the verdict may say it already
    return visible(line)


def change_lines(changes: Sequence[ChangeRow]) -> list[str]:
    """What a night prints of its comparison with the baseline: one line per flagged change,
    one "no change" line when every comparison held, nothing when there was none (no
    baseline yet, or a warehouse without ``fct_changes``)."""
    flagged = [ch for ch in changes if ch.is_change]
    if flagged:
        return [change_line(ch) for ch in flagged]
    tested = [ch for ch in changes if ch.is_tested]
    if tested:
        return [f"no change vs baseline ({len(tested)} comparison(s))"]
    return []  # no baseline yet: nothing was compared, so nothing is said


def regression_line(r: Regression) -> str:
    return visible(f"regression: {r.deployment}/{r.workload} {r.words}")
