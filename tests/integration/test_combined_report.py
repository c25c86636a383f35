"""Hand-made sweeps read as one report, on the session's hand-made CLI sweeps
(``tests/integration/cli_sweeps.py``: one warehouse built by the CLI's own sweeps).

- Two deployments swept by hand, each in its own run, then one of them again in a third:
  `sparkcap report --run A --run B --run C` (and `--night` for the day they ran) gives one
  page whose headline is the fleet formula over the newest measurement of each deployment,
  read from the marts, never summed in Python.
- `sparkcap sweep --run latest` adds a second deployment to the first sweep's run: one run,
  both deployments in its marts and its report; sweeping a pair twice is refused.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.integration.cli_sweeps import CliSweeps
from tests.support.queries import q

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_runs_of_hand_made_sweeps_read_as_one_report(cli_sweeps: CliSweeps, tmp_path: Path) -> None:
    db, runs = cli_sweeps.db, cli_sweeps.separate
    run_a, run_b, run_c = runs
    assert cli_sweeps.first.returncode == 0, cli_sweeps.first.stderr  # its build took these runs
    picked = q(
        db,
        "select deployment, run_id, capacity_streams from marts.capacity_of(?) order by deployment",
        [runs],
    )
    own = dict(
        q(
            db,
            "select deployment, capacity_streams from marts.fct_capacity "
            "where (deployment, run_id) in (('a', ?), ('b', ?))",
            [run_c, run_b],
        )
    )
    # the night's page: the fleet formula over the day's runs, as the marts give it
    day_runs = [r for (r,) in q(db, "select run_id from raw.runs")]
    night_fleet = q(
        db,
        "select capacity_streams from marts.fleet_capacity_of(?) where workload = 'code'",
        [day_runs],
    )
    fleet = q(
        db,
        "select capacity_streams, n_deployments, is_complete "
        "from marts.fleet_capacity_of(?) where workload = 'code'",
        [runs],
    )
    days = [
        d
        for (d,) in q(db, "select distinct cast(timezone('UTC', started_at) as date) from raw.runs")
    ]
    assert [(d, r) for d, r, _ in picked] == [("a", run_c), ("b", run_b)]
    assert fleet == [(own["a"] + own["b"], 2, True)]

    out = tmp_path / "reports"
    args = ["report", "--db", str(db), "--out", str(out)]
    done = cli_sweeps.cli(*args, "--run", run_a, "--run", run_b, "--run", run_c)
    assert done.returncode == 0, done.stderr[-2000:]
    (index,) = out.glob("combined-3-runs-*/index.html")
    page = index.read_text(encoding="utf-8")
    assert "Runs in this report" in page
    assert all(r in page for r in runs)
    assert f"<b>≈ {own['a'] + own['b']} code streams</b>" in page

    if days == [day := datetime.now(UTC).date()]:  # the runs did not straddle midnight UTC
        done = cli_sweeps.cli(*args, "--night", day.isoformat())
        assert done.returncode == 0, done.stderr[-2000:]
        night_page = (out / f"night-{day.isoformat()}" / "index.html").read_text()
        ((newest,),) = night_fleet
        assert f"<b>≈ {newest} code streams</b>" in night_page

    bad = cli_sweeps.cli(*args, "--run", run_a, "--run", "no-such-run")
    assert bad.returncode != 0
    assert bad.stderr.strip().splitlines()[-1].startswith("error: no run no-such-run")
    both = cli_sweeps.cli(*args, "--run", run_a, "--night", "2026-01-01")
    assert both.returncode != 0 and "--run or --night" in both.stderr
    empty = cli_sweeps.cli(*args, "--night", "1999-01-01")
    assert empty.returncode != 0 and "no built run started on 1999-01-01" in empty.stderr


def test_hand_made_sweeps_of_two_deployments_read_as_one_report(
    cli_sweeps: CliSweeps, tmp_path: Path
) -> None:
    first, second, again = cli_sweeps.first, cli_sweeps.second, cli_sweeps.again
    assert first.returncode == 0, first.stderr
    run_id = cli_sweeps.joined_run
    assert second.returncode == 0, second.stderr
    assert f"run id: {run_id}" in second.stdout
    assert again.returncode == 1
    assert again.stderr.strip() == (
        f"error: run {run_id} already holds a/code: sweep it under another deployment name "
        "or into a new run"
    )
    db = cli_sweeps.db
    deps = q(db, "select deployment from marts.fct_capacity where run_id = ? order by 1", [run_id])
    ((cfg,),) = q(db, "select config_json from raw.runs where run_id = ?", [run_id])
    (n_runs,) = q(db, "select count(*) from raw.runs")
    (n_dims,) = q(db, "select count(*) from raw.deployments where run_id = ?", [run_id])
    # one run more than those staged before (three made apart, the metrics run): the second
    # sweep joined the first's
    assert deps == [("a",), ("b",)] and n_runs == (len(cli_sweeps.separate) + 2,)
    assert n_dims == (2,)
    assert [s["deployment"]["name"] for s in json.loads(cfg)["sweeps"]] == ["a", "b"]
    reports = tmp_path / "r"
    rep = cli_sweeps.cli(
        "report", "--db", str(cli_sweeps.db), "--run", run_id, "--out", str(reports)
    )
    assert rep.returncode == 0, rep.stderr
    html = (reports / run_id / "index.html").read_text()
    assert ">a<" in html and ">b<" in html
