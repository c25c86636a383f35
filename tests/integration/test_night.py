"""One night, one object: a launched server starts once and serves every step, so the probes
meet the server the sweep measured, at the endpoint the run recorded."""

from __future__ import annotations

import pytest

from tests.integration.reliability.imperfect_nights import ImperfectNight
from tests.support.queries import q

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_night_launches_its_servers_once(imperfect_cli_night: ImperfectNight) -> None:
    """The session's imperfect CLI night launches its ``live`` simulator itself (``launch:
    kind: sim``), with a prompt-cache probe, beside a dead node and hostile servers (what
    costs the others nothing): ``night.plan.launched`` is counted where a night looks it up."""
    night = imperfect_cli_night
    assert len(night.launches) == 1, night.launches  # sweep and probes shared one launch
    (launched,) = night.launches
    assert set(launched) == {"live"}  # only what the fleet asked to launch
    recorded = q(night.db, "select endpoint from raw.deployments where deployment = 'live'")
    used = q(
        night.db, "select distinct probe is null, endpoint from raw.waves where deployment = 'live'"
    )
    outcomes = q(night.db, "select step, status from raw.step_outcomes where deployment = 'live'")
    assert recorded == [(launched["live"],)]
    assert {e for _, e in used} == {launched["live"]}
    assert {p for p, _ in used} == {True, False}  # sweep waves and probe waves
    assert set(outcomes) == {("sweep", "ok"), ("probe:prompt-cache", "ok")}, outcomes
