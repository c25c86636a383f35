"""Hand-made sweeps read as one report (issue 17), in one warehouse built by the CLI's own
sweeps (issue 35: the two tests each built a warehouse of their own).

- Two deployments swept by hand, each in its own run, then one of them again in a third:
  `sparkcap report --run A --run B --run C` (and `--night` for the day they ran) gives one
  page whose headline is the fleet formula over the newest measurement of each deployment,
  read from the marts, never summed in Python.
- `sparkcap sweep --run latest` adds a second deployment to the first sweep's run: one run,
  both deployments in its marts and its report; sweeping a pair twice is refused.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from subprocess import CompletedProcess

import duckdb
import pytest

from sparkcap.config import SweepPlan, SweepRequest
from sparkcap.night.sweeps import run_sweeps
from sparkcap.servers.sim.server import SimServer
from tests.integration.helpers import RELAXED_TIMING, cli_in_process, dep, fast_profile

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def one_run(db: Path, endpoint: str, model: str, levels: tuple[int, ...]) -> str:
    plan = SweepPlan(levels=levels, trials=1, warmup=False, max_tokens=30, max_remeasures=0)
    req = SweepRequest(deployment=dep(endpoint, model), workload="code", plan=plan)
    return asyncio.run(run_sweeps([req], db)).run_id


@dataclass(frozen=True)
class HandMade:
    db: Path
    env: dict[str, str]
    separate: list[str]  # a, b, a again: each a run of its own, staged without a build
    first: CompletedProcess[str]  # `sparkcap sweep --model a`: a new run, built
    second: CompletedProcess[str]  # `sparkcap sweep --model b --run latest`: into it, built
    again: CompletedProcess[str]  # `sparkcap sweep --model a --run RUN`: refused

    @property
    def joined_run(self) -> str:
        found = re.search(r"run id: (\S+)", self.first.stdout)
        assert found is not None, self.first.stdout + self.first.stderr
        return found[1]

    def cli(self, *args: str) -> CompletedProcess[str]:
        return cli_in_process(*args, env=self.env)


@pytest.fixture(scope="module")
def hand_made(tmp_path_factory: pytest.TempPathFactory) -> HandMade:
    tmp_path = tmp_path_factory.mktemp("hand-made")
    db = tmp_path / "h.duckdb"
    # 12- and 30-token streams: about the runs read as one report, not the client's timing of
    # 0.1 s waves (2.7 % timing error on a fully loaded machine spoiled every b/code trial)
    env = {**os.environ, "SPARKCAP_HOME": str(tmp_path / "home"), **RELAXED_TIMING}

    def cli(*args: str) -> CompletedProcess[str]:
        return cli_in_process(*args, env=env)

    with SimServer([fast_profile("a"), fast_profile("b")]) as sim:
        with pytest.MonkeyPatch.context() as relaxed:
            for k, v in RELAXED_TIMING.items():
                relaxed.setenv(k, v)
            separate = [
                one_run(db, sim.endpoint, "a", (1, 2)),
                one_run(db, sim.endpoint, "b", (1, 2, 4)),
                one_run(db, sim.endpoint, "a", (1,)),  # a again, later: the newest counts
            ]
        common = ["--endpoint", sim.endpoint, "--workload", "code", "--levels", "1,2"]
        common += ["--trials", "1", "--max-tokens", "12", "--db", str(db)]
        first = cli("sweep", "--model", "a", *common)
        run_id = re.search(r"run id: (\S+)", first.stdout)
        second = cli("sweep", "--model", "b", "--run", "latest", *common)
        again = cli("sweep", "--model", "a", "--run", run_id[1] if run_id else "?", *common)
    return HandMade(db=db, env=env, separate=separate, first=first, second=second, again=again)


def test_runs_of_hand_made_sweeps_read_as_one_report(hand_made: HandMade, tmp_path: Path) -> None:
    db, runs = hand_made.db, hand_made.separate
    run_a, run_b, run_c = runs
    assert hand_made.first.returncode == 0, hand_made.first.stderr  # its build took these runs
    with duckdb.connect(str(db), read_only=True) as con:
        picked = con.execute(
            "select deployment, run_id, capacity_streams from marts.capacity_of(?) "
            "order by deployment",
            [runs],
        ).fetchall()
        own = dict(
            con.execute(
                "select deployment, capacity_streams from marts.fct_capacity "
                "where (deployment, run_id) in (('a', ?), ('b', ?))",
                [run_c, run_b],
            ).fetchall()
        )
        # the day's newest of each: both in the run the CLI's sweeps made last
        newest = con.execute(
            "select sum(capacity_streams) from marts.fct_capacity where run_id = ?",
            [hand_made.joined_run],
        ).fetchall()[0][0]
        fleet = con.execute(
            "select capacity_streams, n_deployments, is_complete "
            "from marts.fleet_capacity_of(?) where workload = 'code'",
            [runs],
        ).fetchall()
        days = con.execute(
            "select distinct cast(timezone('UTC', started_at) as date) from raw.runs"
        ).fetchall()
    assert [(d, r) for d, r, _ in picked] == [("a", run_c), ("b", run_b)]
    assert fleet == [(own["a"] + own["b"], 2, True)]

    out = tmp_path / "reports"
    args = ["report", "--db", str(db), "--out", str(out)]
    done = hand_made.cli(*args, "--run", run_a, "--run", run_b, "--run", run_c)
    assert done.returncode == 0, done.stderr[-2000:]
    (index,) = out.glob("combined-3-runs-*/index.html")
    page = index.read_text(encoding="utf-8")
    assert "Runs in this report" in page
    assert all(r in page for r in runs)
    assert f"<b>≈ {own['a'] + own['b']} code streams</b>" in page

    ((day,),) = days if len(days) == 1 else ((None,),)
    if day == datetime.now(UTC).date():  # the runs did not straddle midnight UTC
        done = hand_made.cli(*args, "--night", day.isoformat())
        assert done.returncode == 0, done.stderr[-2000:]
        night_page = (out / f"night-{day.isoformat()}" / "index.html").read_text()
        assert f"<b>≈ {newest} code streams</b>" in night_page

    bad = hand_made.cli(*args, "--run", run_a, "--run", "no-such-run")
    assert bad.returncode != 0
    assert bad.stderr.strip().splitlines()[-1].startswith("error: no run no-such-run")
    both = hand_made.cli(*args, "--run", run_a, "--night", "2026-01-01")
    assert both.returncode != 0 and "--run or --night" in both.stderr
    empty = hand_made.cli(*args, "--night", "1999-01-01")
    assert empty.returncode != 0 and "no built run started on 1999-01-01" in empty.stderr


def test_hand_made_sweeps_of_two_deployments_read_as_one_report(
    hand_made: HandMade, tmp_path: Path
) -> None:
    first, second, again = hand_made.first, hand_made.second, hand_made.again
    assert first.returncode == 0, first.stderr
    run_id = hand_made.joined_run
    assert second.returncode == 0, second.stderr
    assert f"run id: {run_id}" in second.stdout
    assert again.returncode == 1
    assert again.stderr.strip() == (
        f"error: run {run_id} already holds a/code: sweep it under another deployment name "
        "or into a new run"
    )
    with duckdb.connect(str(hand_made.db), read_only=True) as con:
        deps = con.execute(
            "select deployment from marts.fct_capacity where run_id = ? order by 1", [run_id]
        ).fetchall()
        (cfg,) = con.execute(  # type: ignore[misc]
            "select config_json from raw.runs where run_id = ?", [run_id]
        ).fetchone()
        n_runs = con.execute("select count(*) from raw.runs").fetchone()
        dims = con.execute("select count(*) from raw.deployments where run_id = ?", [run_id])
        n_dims = dims.fetchone()
    # one run more than the three made apart: the second sweep joined the first's
    assert deps == [("a",), ("b",)] and n_runs == (len(hand_made.separate) + 1,)
    assert n_dims == (2,)
    assert [s["deployment"]["name"] for s in json.loads(cfg)["sweeps"]] == ["a", "b"]
    reports = tmp_path / "r"
    rep = hand_made.cli("report", "--db", str(hand_made.db), "--run", run_id, "--out", str(reports))
    assert rep.returncode == 0, rep.stderr
    html = (reports / run_id / "index.html").read_text()
    assert ">a<" in html and ">b<" in html
