"""A capacity worded once from the mart's verdict, the fleet's line over it, a search step
the record decided otherwise, the sessions' cache, and the line saying why a capacity is where
it is."""

from __future__ import annotations

import pytest

from sparkcap.publish.marts import BottleneckRow, FleetRow
from sparkcap.publish.text.capacity import (
    bottleneck_line,
    capacity_line,
    capacity_words,
    fleet_line,
)
from tests.support.rows import capacity

# one row per way fct_capacity words a capacity (capacity_verdict's cases, as dbt writes them)
VERDICTS = [
    ("4 streams (fails at 8)", True),
    ("1 stream (fails at 2)", True),
    ("≥ 16 streams (all tested levels pass)", True),
    ("below 20 tok/s even at the lowest level", True),
    ("3 streams (no valid measurement at level 4: 2 of 2 truncated)", True),
    ("3 streams (fails at 4) · search; sustain wave: held at 3 streams", True),
    ("2 streams · search; sustain wave: fell at 3, held at 2 streams: capacity moved down", True),
    (
        "3 streams (fails at 4) · search; sustain wave: held at 3 streams"
        " · undecided between 3 and 5",
        True,
    ),
    ("no valid measurement at level 1: 2 of 2 rejected (429)", False),
    (
        "no valid measurement at level 1: 1 of 1 trial invalid: client timing"
        " (nor at any other level)",
        False,
    ),
]


@pytest.mark.parametrize(("verdict", "measured"), VERDICTS)
def test_each_verdict_is_printed_as_the_mart_words_it(verdict: str, measured: bool) -> None:
    row = capacity(verdict, measured=measured)
    assert capacity_words(row) == f"glm/code: {verdict}"
    assert capacity_line(row) == f"capacity at 20 tok/s — glm/code: {verdict}"
    # only a pair that measured nothing is the reason a sweep fails, and says so first
    failing = capacity_words(row, failing=True)
    assert failing == (
        f"glm/code: {verdict}" if measured else f"glm/code measured nothing: {verdict}"
    )


@pytest.mark.parametrize(("threshold", "shown"), [(20.0, "20"), (12.5, "12.5"), (0.25, "0.25")])
def test_a_threshold_prints_as_its_number(threshold: float, shown: str) -> None:
    row = capacity("4 streams (fails at 8)", threshold_tok_s=threshold)
    assert capacity_line(row).startswith(f"capacity at {shown} tok/s — ")


@pytest.mark.parametrize(
    ("extrapolated", "missing", "note"),
    [
        (None, None, ""),
        ("qwen", None, " (replicas extrapolated: qwen)"),
        (None, "dead", " (partial: dead not measured)"),
        ("qwen", "dead, r429", " (replicas extrapolated: qwen) (partial: dead, r429 not measured)"),
    ],
)
def test_the_fleet_line_says_what_the_sum_rests_on(
    extrapolated: str | None, missing: str | None, note: str
) -> None:
    line = fleet_line(FleetRow("code", 28, 20.0, extrapolated, missing, 3))
    assert line == f"fleet capacity at 20 tok/s — code: 28 streams{note}"


def test_a_fleet_figure_nothing_measured_is_said_so_and_sessions_are_counted_as_sessions() -> None:
    assert fleet_line(FleetRow("agent", 0, 20.0, None, "gemma", 0)) == (
        "fleet capacity at 20 tok/s — agent: not measured (gemma)"
    )
    assert fleet_line(FleetRow("agent", 3, 20.0, None, "dead", 1)) == (
        "fleet capacity at 20 tok/s — agent: 3 sessions (partial: dead not measured)"
    )
    assert fleet_line(FleetRow("agent", 1, 20.0, None, None, 1)) == (
        "fleet capacity at 20 tok/s — agent: 1 session"
    )


def test_a_search_step_decided_otherwise_live_is_named_with_the_records_reason() -> None:
    from sparkcap.publish.marts import SearchDisagreement
    from sparkcap.publish.text.capacity import search_disagreement_words

    d = SearchDisagreement(
        "glm", "code", "level", 12, "pass", "fail", "a counted trial queued streams", None
    )
    assert search_disagreement_words(d) == (
        "note: glm/code search level at 12 streams was decided live as pass; the record says "
        "fail (a counted trial queued streams)"
    )
    bare = d._replace(live_verdict=None, verdict_reason=None, invalid_reasons="dq: lengths")
    assert search_disagreement_words(bare).endswith("undecided; the record says fail (dq: lengths)")


def test_session_cache_lines_name_each_deployments_state_and_every_flagged_wave() -> None:
    from sparkcap.publish.marts import SessionCacheRow
    from sparkcap.publish.text.capacity import session_cache_lines

    rows = [
        SessionCacheRow("a", 1, 1, 1, "as planned", 0.95, "verified", False, None),
        SessionCacheRow("a", 2, 1, 1, "evicted", 0.3, "verified", True, "turns found 30%"),
        SessionCacheRow("b", 1, 1, 1, None, None, None, False, None),
    ]
    assert session_cache_lines(rows) == [
        "  sessions' cache a/agent: as planned, evicted over 2 wave(s); cache reset: verified",
        "  flagged a/agent 2 session(s) trial 1: turns found 30%",
        "  sessions' cache b/agent: nothing to judge over 1 wave(s)",
    ]


def _why(**kw: object) -> BottleneckRow:
    base: dict[str, object] = {
        "deployment": "qwen",
        "workload": "code",
        "capacity_streams": 8,
        "limit_level": 16,
        "bottleneck": "memory-bandwidth",
        "confidence": "medium",
        "evidence": "16.7 tok/s = 80 % of the 20.9 tok/s the memory allows at 16 streams",
        "advice": None,
        "limit_level_tok_s": 16.7,
        "limit_level_bound_tok_s": 20.9,
        "limit_level_share_of_bound": 0.8,
        "bound_capacity_streams": 12,
        "bound_flags": None,
        "unavailable_evidence": None,
        "is_confirmed": True,
        "overruled_evidence": None,
    }
    return BottleneckRow(**{**base, **kw})  # type: ignore[arg-type]


def test_the_why_line_says_what_the_measurements_overruled() -> None:
    line = bottleneck_line(
        _why(overruled_evidence="request-slots: 4 slot(s) for 16 streams, but up to 0 waiting")
    )
    assert line is not None
    assert line.startswith("  why qwen/code: memory bandwidth (medium) — 16.7 tok/s = 80 % of")
    assert line.endswith(
        "; overruled by the measurements: request-slots: 4 slot(s) for 16 streams, "
        "but up to 0 waiting"
    )


def test_a_verdict_only_configuration_supports_is_said_unconfirmed() -> None:
    line = bottleneck_line(
        _why(
            bottleneck="request-slots",
            confidence="low",
            is_confirmed=False,
            evidence="consistent with 2 slot(s) for 4 streams, unconfirmed: no server gauge",
        )
    )
    assert line == (
        "  why qwen/code: request slots (queueing), unconfirmed (low) — consistent with 2 "
        "slot(s) for 4 streams, unconfirmed: no server gauge"
    )
