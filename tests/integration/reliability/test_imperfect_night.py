"""A night against an imperfect fleet: one dead node costs that node, never the night.

A fleet of one live simulated deployment and one whose endpoint nobody listens on (port 9),
each with a prompt-cache probe, the dead one's first: the live deployment is swept, staged,
validated, built and reported, and its probe still runs; the dead one is named as not measured
(with the reason) in ``raw.step_outcomes``, ``marts.fct_step_outcomes``, the fleet capacity
and the report, and the night ends non-zero (CLI) or Failed (Prefect) after publishing.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pytest
import yaml

from sparkcap.servers.sim.server import SimServer
from tests.integration.helpers import (
    fast_profile,
    wave_census,
)
from tests.integration.reliability.imperfect_cli_night import ImperfectNight

pytestmark = [pytest.mark.reliability, pytest.mark.integration, pytest.mark.slow]


DEAD = "http://127.0.0.1:9/v1"


def fleet_file(tmp_path: Path, live_endpoint: str) -> Path:
    probe = {"prompt-cache": {"document_tokens": 400, "warm_requests": 1}}
    fleet = {
        "name": "imperfect",
        "workloads": {"code": {"levels": [1, 2], "trials": 1, "max_tokens": 8}},
        "deployments": [
            {
                "name": "dead",
                "model": "m",
                "endpoint": DEAD,
                "probes": probe,
                "timeouts": {"connect_s": 2},
            },
            {"name": "live", "model": "m", "endpoint": live_endpoint, "probes": probe},
        ],
    }
    path = tmp_path / "imperfect.yaml"
    path.write_text(yaml.safe_dump(fleet))
    return path


def q(db: Path, sql: str) -> list[tuple[object, ...]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def assert_the_night_names_the_dead_node(
    db: Path,
    report: Path,
    measured: frozenset[str] = frozenset({"live"}),
    also_unmeasured: str = "",
) -> None:
    """``measured``: the deployments with a capacity; ``also_unmeasured``: the fleet
    capacity's not-measured list before the dead node (", "-joined, sorted)."""
    caps = q(db, "select deployment, workload, is_measured from marts.fct_capacity")
    # the live deployment was measured and built; the dead one has no capacity row at all
    assert {d for d, _, ok in caps if ok} == measured, caps
    assert "dead" not in {d for d, _, _ in caps}
    outcomes = dict(
        ((d, step), (status, reason))
        for d, step, status, reason in q(
            db, "select deployment, step, status, reason from raw.step_outcomes"
        )
    )
    assert outcomes[("dead", "preflight")][0] == "failed"
    assert "endpoint unreachable" in str(outcomes[("dead", "preflight")][1])
    assert outcomes[("dead", "probe:prompt-cache")][0] == "failed"
    assert outcomes[("live", "sweep")] == ("ok", None)
    assert outcomes[("live", "probe:prompt-cache")][0] == "ok"  # the dead probe cost nothing
    assert q(db, "select count(*) from marts.fct_prompt_cache where deployment = 'live'") == [(1,)]
    (missing, complete) = q(
        db, "select not_measured_deployments, is_complete from marts.fct_fleet_capacity"
    )[0]
    assert missing == also_unmeasured + "dead" and complete is False
    html = report.read_text()
    assert "Not measured tonight" in html and "Partial night" in html
    assert "endpoint unreachable" in html and "dead" in html


def test_cli_night_with_a_dead_node(imperfect_cli_night: ImperfectNight) -> None:
    """The dead node of the session's imperfect CLI night (``imperfect_cli_night.py``: it
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


def test_a_prefect_night_with_a_dead_node_and_a_busy_database_publishes_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two imperfections in one Prefect night (each was a night of its own, ~60 CPU-s apiece):
    a dead node, and a database busy for the whole sweep (every wave stays in the spool) whose
    staging task then fails once. Prefect retries the staging; the warehouse ends with every
    wave of the live deployment exactly once and whole; the night ends Failed after
    publishing, naming the dead node."""
    os.environ.setdefault("PREFECT_HOME", str(tmp_path / "prefect"))
    from prefect.testing.utilities import prefect_test_harness

    from sparkcap.night import steps as pipeline
    from sparkcap.night.schedule import load_nightly_flow
    from sparkcap.store import spool
    from sparkcap.store.warehouse import WarehouseBusy

    real_stage_spool, real_stage_pending = spool.stage_spool, pipeline.stage_pending
    attempts: list[str] = []

    def busy_during_the_sweep(db_path, root=None, run_id=None):  # type: ignore[no-untyped-def]
        if run_id is not None:  # the sweep's wave-by-wave staging
            raise WarehouseBusy("injected: database is busy")
        return real_stage_spool(db_path, root, run_id)

    def flaky_stage_pending(db_path):  # type: ignore[no-untyped-def]
        attempts.append("try")
        if len(attempts) == 1:
            raise RuntimeError("injected staging failure")
        return real_stage_pending(db_path)

    monkeypatch.setattr(spool, "stage_spool", busy_during_the_sweep)
    monkeypatch.setattr(pipeline, "stage_pending", flaky_stage_pending)
    db, reports = tmp_path / "n.duckdb", tmp_path / "reports"
    with prefect_test_harness(server_startup_timeout=120), SimServer([fast_profile("m")]) as sim:
        state = load_nightly_flow()(
            fleet=str(fleet_file(tmp_path, sim.endpoint)),
            db=str(db),
            profile="full",
            reports=str(reports),
            return_state=True,
        )
    assert len(attempts) == 2  # failed once, retried once
    assert state.is_failed()
    assert "dead not measured: endpoint unreachable" in (state.message or "")
    assert (reports / "latest" / "index.html").exists()
    assert_the_night_names_the_dead_node(db, next(p for p in reports.glob("2*/index.html")))
    n_waves, bad = wave_census(db)
    (n_distinct,) = q(db, "select count(distinct wave_id) from raw.waves")[0]
    (n_live,) = q(db, "select count(*) from raw.waves where deployment = 'live' and probe is null")[
        0
    ]
    planned = 2 * (1 + 1)  # the live deployment's two levels x (warm-up + one trial), or more
    assert n_waves == n_distinct and n_live >= planned and bad == 0
    assert spool.pending(db) == []
