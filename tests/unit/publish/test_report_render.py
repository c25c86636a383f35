"""The report's headline names each measured workload in its own unit, and a workload no
deployment measured apart from them, never as a fleet of 0."""

from __future__ import annotations

from typing import NamedTuple

from sparkcap.publish.report.render import _headline_part


class _Fleet(NamedTuple):
    workload: str
    capacity_streams: int
    n_measured_deployments: int


def test_the_headline_counts_sessions_for_agents_and_streams_otherwise() -> None:
    assert _headline_part(_Fleet("code", 8, 2)) == "≈ 8 code streams"
    assert _headline_part(_Fleet("agent", 3, 1)) == "≈ 3 agent sessions"
