"""A night against an imperfect fleet: one dead node costs that node, never the night.

The session's imperfect CLI night (``imperfect_nights.py``) holds a deployment whose endpoint
nobody listens on (port 9), with a prompt-cache probe, first: the others are swept, staged,
validated, built and reported, and the live one's probe still runs; the dead one is named as
not measured (with the reason) in ``raw.step_outcomes``, ``marts.fct_step_outcomes``, the
fleet capacity and the report, and the night ends non-zero after publishing. The same under
Prefect, with a busy database: ``tests/e2e/test_flow.py``.
"""

from __future__ import annotations

import pytest

from tests.integration.reliability.imperfect_nights import (
    ImperfectNight,
    assert_the_night_names_the_dead_node,
)

pytestmark = [pytest.mark.reliability, pytest.mark.integration, pytest.mark.slow]


def test_cli_night_with_a_dead_node(imperfect_cli_night: ImperfectNight) -> None:
    """The dead node of the session's imperfect CLI night (``imperfect_nights.py``: it
    shares the night with a launched simulator, absurd usage and absurd /metrics)."""
    p = imperfect_cli_night
    assert p.returncode == 1, p.stderr
    assert "not measured — dead not measured: endpoint unreachable" in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("error: run ")
    for step in ("probes", "stage", "validate", "dbt-build", "report"):  # every step is shown
        assert f"step {step} …" in p.stderr, p.stderr
        assert f"step {step} done in " in p.stderr or f"step {step} failed after " in p.stderr
    # the absurd deployment's streams have no counts: no valid trial, not measured either
    assert "(partial: absurd, dead not measured)" in p.stdout, p.stdout
    report = next(p.reports.glob("2*/index.html"))
    assert_the_night_names_the_dead_node(
        p.db, report, measured=frozenset({"live", "huge"}), also_unmeasured="absurd, "
    )
