"""What a distributed night's child holds, and what the fleet file and CLI accept."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from sparkcap.config.fleet import Distributed, load_fleet
from sparkcap.config.plan import SearchPlan, SweepPlan
from sparkcap.errors import DistributedError, FleetError
from sparkcap.night.distributed.child import ChildSpec, child_limits, peak_streams
from sparkcap.store.lake import partition
from tests.support.cli import run_cli
from tests.support.fleets import write_fleet


def _fleet(tmp_path: Path, **extra: object) -> Path:
    return write_fleet(
        tmp_path / "f.yaml",
        {
            "name": "f",
            "workloads": {"code": {"levels": [1, 2, 8]}},
            "deployments": [
                {"name": "a", "model": "m", "endpoint": "http://127.0.0.1:9/v1", "shares": ["n1"]},
                {"name": "b", "model": "m", "endpoint": "http://127.0.0.1:9/v1"},
            ],
            **extra,
        },
    )


def test_a_child_holds_its_target_its_shares_and_its_peak_streams(tmp_path: Path) -> None:
    fleet = load_fleet(_fleet(tmp_path, distributed={"host_stream_budget": 64}))
    a, b = fleet.deployments
    grid = fleet.workloads["code"]
    assert peak_streams(grid) == 8
    assert child_limits(a, grid, fleet.distributed, "h1") == [
        (["target:a", "share:n1"], 1, 1),
        (["host:h1"], 8, 64),
    ]
    assert child_limits(b, grid, fleet.distributed, "h2")[0] == (["target:b"], 1, 1)
    searched = SweepPlan(search=SearchPlan(max_level=48))
    assert peak_streams(searched) == 48
    too_many = SweepPlan(levels=(1, 128))
    with pytest.raises(DistributedError, match="reaches 128 streams, more than a client host's"):
        child_limits(a, too_many, fleet.distributed, "h1")


def test_distributed_settings_are_checked_with_file_and_line(tmp_path: Path) -> None:
    assert load_fleet(_fleet(tmp_path)).distributed == Distributed()
    with pytest.raises(FleetError, match=r"f\.yaml:\d+: distributed\.stall_s: .*greater than"):
        load_fleet(_fleet(tmp_path, distributed={"stall_s": 1}))
    with pytest.raises(FleetError, match=r"distributed\.lease_s"):
        load_fleet(_fleet(tmp_path, distributed={"lease_s": 10}))  # Prefect's minimum is 60
    with pytest.raises(FleetError, match=r"distributed\.pools: unknown key"):
        load_fleet(_fleet(tmp_path, distributed={"pools": "x"}))


def test_a_childs_parameters_carry_no_fleet_dump(tmp_path: Path) -> None:
    """Header secrets in a fleet file must not reach Prefect's database: the child gets the
    file's path, and the spec refuses anything else."""
    spec = ChildSpec(
        fleet_path="/f.yaml", deployment="a", workload="code", run_id="r", night="n", lake="l"
    )
    assert set(spec.model_dump()) == {
        "fleet_path", "profile", "search", "deployment", "workload", "run_id", "night",
        "lake", "endpoint", "attempt",
    }  # fmt: skip
    with pytest.raises(ValueError, match="extra"):
        ChildSpec.model_validate({**spec.model_dump(), "fleet": {"deployments": []}})


def test_partition_values_are_path_safe() -> None:
    assert partition("2026-11-30", "qwen/a b", "20261130T0200Z-x") == (
        "night=2026-11-30/deployment=qwen__a%20b/run_id=20261130T0200Z-x"
    )


def _cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """In a child process, with ``home`` as its SPARKCAP_HOME and no Prefect server named."""
    env = {**os.environ, "SPARKCAP_HOME": str(home)}
    env.pop("PREFECT_API_URL", None)
    return run_cli(*args, env=env, timeout=120)


def test_distributed_needs_prefect_and_a_server(tmp_path: Path) -> None:
    fleet = str(_fleet(tmp_path))
    both = _cli("run", "--fleet", fleet, "--distributed", "--no-prefect", home=tmp_path)
    assert both.returncode != 0
    assert "--distributed runs on Prefect workers: leave out --no-prefect" in both.stderr
    no_server = _cli("run", "--fleet", fleet, "--distributed", home=tmp_path)
    assert no_server.returncode != 0
    assert "needs a Prefect server its workers share: set PREFECT_API_URL" in no_server.stderr
    assert "Traceback" not in no_server.stderr
    assert not (tmp_path / "warehouse").exists()


def test_a_plan_over_a_hosts_budget_is_refused_before_anything_starts(tmp_path: Path) -> None:
    fleet = str(_fleet(tmp_path, distributed={"host_stream_budget": 4}))
    over = _cli("run", "--fleet", fleet, "--distributed", home=tmp_path)
    assert over.returncode != 0
    assert "a: the plan reaches 8 streams, more than a client host's budget of 4" in over.stderr
    assert "Traceback" not in over.stderr
    assert not (tmp_path / "warehouse").exists()


def test_a_distributed_child_caps_its_search_at_this_hosts_calibrated_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker host calibrated to 4 streams: the child's search plans no level above 4 (as a
    local night's does), and the limits it holds reserve the capped peak, not max_level 32."""
    from sparkcap.night import calibrate as cal
    from sparkcap.night.distributed import child
    from sparkcap.settings import get_settings
    from tests.unit.night.test_calibrate import budget

    monkeypatch.setenv("SPARKCAP_HOME", str(tmp_path / "home"))
    here = get_settings().client_host
    cal.write_budget(budget(streams=4, host=here, cpus=os.cpu_count() or 1), cal.budget_path())

    async def reachable(dep: object) -> None:
        return None

    class Planned(Exception):
        pass

    seen: list[SweepPlan] = []

    def limits(fd: object, plan: SweepPlan, settings: object, host: str) -> object:
        seen.append(plan)
        raise Planned

    monkeypatch.setattr(child, "preflight", reachable)
    monkeypatch.setattr(child.SearchJudge, "compile", classmethod(lambda cls, t: None))
    monkeypatch.setattr(child, "child_limits", limits)
    spec = ChildSpec(
        fleet_path=str(_fleet(tmp_path)),
        search={"max_level": 32},
        deployment="a",
        workload="code",
        run_id="r",
        night="n",
        lake=str(tmp_path / "lake"),
    )
    with pytest.raises(Planned):
        child.sweep_child(spec)
    (plan,) = seen
    assert plan.search is not None and plan.search.max_level == 4


def test_a_child_the_parent_gave_up_sends_nothing_and_says_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child given back while its process was only slow to start must not measure on both
    hosts: a stood-down attempt beats (so the parent can tell it lived) and stops there, before
    its preflight, with no status for the parent to read as a sweep."""
    from sparkcap.night.distributed import child
    from sparkcap.store.lake import Lake

    monkeypatch.setenv("SPARKCAP_HOME", str(tmp_path / "home"))

    async def never(dep: object) -> None:
        raise AssertionError("a stood-down child sent a request")

    monkeypatch.setattr(child, "preflight", never)
    spec = ChildSpec(
        fleet_path=str(_fleet(tmp_path)),
        deployment="a",
        workload="code",
        run_id="r",
        night="n",
        lake=str(tmp_path / "lake"),
    )
    lake = Lake(spec.lake)
    lake.stand_down(spec.key, 1)
    outcome = child.sweep_child(spec)
    assert (outcome.state, outcome.waves) == ("stood down", 0)
    assert lake.read_status(spec.key) is None
    assert lake.heartbeat_age_s(spec.key, 1) is not None
    # the second attempt is not the first: it beats apart and is not stood down
    assert lake.heartbeat_age_s(spec.key, 2) is None and not lake.is_stood_down(spec.key, 2)
    with pytest.raises(ValidationError):
        ChildSpec.model_validate({**spec.model_dump(), "attempt": 3})
