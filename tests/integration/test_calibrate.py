"""``sparkcap calibrate`` against the real simulator, with tolerances that fix the outcome, and
a night's search held to the budget it wrote."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sparkcap import cli
from sparkcap.config.deployment import Deployment
from sparkcap.config.plan import SearchPlan, SweepPlan, SweepRequest
from sparkcap.night import calibrate as cal
from sparkcap.night.sweeps import run_sweeps
from sparkcap.servers.sim.server import SimServer
from tests.support.sims import fast_profile
from tests.support.timing import SHORT_STREAM_VARS

pytestmark = [pytest.mark.integration]

# one stream has no start skew; two always have some: a skew tolerance of 1e-9 passes the
# first size and spoils the next whatever the machine's load (the timing bound is relaxed)
SKEW_SPOILS_TWO = {"start_skew_tolerance": 1e-9, "timing_error_tolerance": 0.5}


def test_calibrate_finds_the_last_clean_size_and_writes_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SPARKCAP_DBT_VARS", json.dumps(SKEW_SPOILS_TWO))
    affinity = os.sched_getaffinity(0)
    result = cal.calibrate(sizes=(1, 2, 4), stream_tokens=30)
    assert os.sched_getaffinity(0) == affinity  # this process's CPUs given back
    assert [s.streams for s in result.sizes] == [1, 2]  # 4 never tried: 2 ended the ladder
    assert result.sizes[0].spoiled is None
    assert result.sizes[1].spoiled is not None and "start skew" in result.sizes[1].spoiled
    assert (result.budget_streams, result.ceiling_found) == (1, True)
    assert result.skew_tolerance == 1e-9  # dbt's var as the environment set it
    if len(affinity) >= 2:
        assert result.server_cpus and not set(result.server_cpus) & set(result.client_cpus)
    assert cal.read_budget() == result  # $SPARKCAP_HOME/host-budget.json


def test_calibrate_with_nothing_clean_is_one_error_line_and_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPARKCAP_DBT_VARS", json.dumps(SKEW_SPOILS_TWO))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["calibrate", "--max-streams", "2"])
    assert exit_.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "error: this host timed no wave within the tolerances: 2 streams: client release: "
        "start skew"
    )
    assert not cal.budget_path().exists()


def test_a_search_is_capped_at_this_hosts_budget(
    monkeypatch: pytest.MonkeyPatch, db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SPARKCAP_DBT_VARS", json.dumps(SHORT_STREAM_VARS))
    budget = cal.HostBudget(
        host=cal.get_settings().client_host,
        cpus=len(cal.host_cpus()),
        client_cpus=cal.host_cpus(),
        server_cpus=(),
        measured_at=datetime.now(UTC),
        timing_tolerance=0.005,
        skew_tolerance=0.05,
        stream_tokens=120,
        stream_tok_s=60.0,
        sizes=(),
        budget_streams=2,
        client_processes=1,
        ceiling_found=True,
    )
    cal.write_budget(budget, cal.budget_path())
    with SimServer([fast_profile()]) as sim:
        dep = Deployment(name="m", endpoint=sim.endpoint, model="m")  # type: ignore[arg-type]
        search = SearchPlan(
            max_level=16,
            trials_max=1,
            trial_tokens=8,
            warmup_tokens=4,
            sustain_factor=0,
            dip_check_levels=0,
        )
        plan = SweepPlan(max_tokens=16, client_processes=1, search=search)
        req = SweepRequest(deployment=dep, workload="code", plan=plan)
        result = asyncio.run(run_sweeps([req], db_path, threshold_tok_s=5.0))
    assert result.waves and max(w.concurrency for w in result.waves) == 2
    said = "search capped at 2 streams: this host's calibrated budget (sparkcap calibrate, "
    assert said + budget.date in caplog.text
