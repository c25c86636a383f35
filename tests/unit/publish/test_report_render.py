"""The report's headline names each measured workload in its own unit, and a workload no
deployment measured apart from them, never as a fleet of 0."""

from __future__ import annotations

from sparkcap.publish.text.capacity import fleet_headline


def test_the_headline_counts_sessions_for_agents_and_streams_otherwise() -> None:
    assert fleet_headline([("code", 8)]) == "≈ 8 code streams"
    assert fleet_headline([("agent", 3)]) == "≈ 3 agent sessions"
    assert fleet_headline([("code", 8), ("prose", 3)]) == "≈ 8 code streams or ≈ 3 prose streams"
