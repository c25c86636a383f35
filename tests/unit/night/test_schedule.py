"""prefect.yaml is generated from the fleet files' schedules: one source of truth."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from sparkcap.errors import SparkcapError, StaleSchedule
from sparkcap.night.schedule import NIGHTLY_FLOW, load_nightly_flow, prefect_yaml, sync_prefect_yaml
from tests.paths import ROOT


@pytest.mark.reliability
def test_prefect_yaml_is_what_the_fleets_say() -> None:
    fleets = sorted((ROOT / "fleets").glob("*.yaml"))
    assert (ROOT / "prefect.yaml").read_text(encoding="utf-8") == prefect_yaml(fleets, ROOT), (
        "prefect.yaml and the fleets' schedules disagree: run `.venv/bin/sparkcap prefect-yaml`"
    )


def test_a_fleet_schedule_change_reaches_its_deployment(tmp_path: Path) -> None:
    (tmp_path / "fleets").mkdir()
    twin = yaml.safe_load((ROOT / "fleets" / "twin.yaml").read_text())
    twin["schedule"] = {"cron": "30 4 * * 1-5", "timezone": "UTC"}
    path = tmp_path / "fleets" / "twin.yaml"
    path.write_text(yaml.safe_dump(twin))
    unscheduled = dict(twin, name="adhoc")
    del unscheduled["schedule"]
    (tmp_path / "fleets" / "adhoc.yaml").write_text(yaml.safe_dump(unscheduled))
    doc = yaml.safe_load(prefect_yaml(sorted((tmp_path / "fleets").glob("*.yaml")), tmp_path))
    (dep,) = doc["deployments"]  # a fleet without a schedule is run by hand only
    assert dep["name"] == "nightly-twin"
    assert dep["schedules"] == [{"cron": "30 4 * * 1-5", "timezone": "UTC", "active": True}]
    assert dep["parameters"]["fleet"] == "fleets/twin.yaml"


def test_prefect_yaml_is_written_then_checked_and_a_stale_one_refused(tmp_path: Path) -> None:
    (tmp_path / "fleets").mkdir()
    (tmp_path / "fleets" / "twin.yaml").write_text((ROOT / "fleets" / "twin.yaml").read_text())
    target = tmp_path / "prefect.yaml"
    with pytest.raises(StaleSchedule) as missing:
        sync_prefect_yaml(target, None, check=True)
    assert isinstance(missing.value, SparkcapError)
    assert str(missing.value) == (
        f"{target} does not match the fleet files' schedules; run `sparkcap prefect-yaml`"
    )
    assert sync_prefect_yaml(target, None, check=False) == f"wrote {target} (1 deployments)"
    assert sync_prefect_yaml(target, None, check=True) == f"{target} is up to date"
    target.write_text(target.read_text().replace("nightly-twin", "nightly-other"))
    with pytest.raises(StaleSchedule):
        sync_prefect_yaml(target, None, check=True)


def test_the_nightly_flow_is_loaded_by_prefect_from_the_deployed_entrypoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flow `sparkcap run` calls is the one prefect.yaml deploys, loaded the way a worker
    loads it (Prefect's own loader), not a copy imported another way."""
    for name, value in {
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "INFO",
        "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "WARNING",
        "GX_ANALYTICS_ENABLED": "False",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    }.items():
        monkeypatch.setenv(name, value)  # what prepare_prefect_env would set, undone after
    from prefect import Flow  # after the environment above: Prefect reads it once

    flow = load_nightly_flow()
    assert isinstance(flow, Flow) and flow.name == "nightly-fleet-sweep"
    assert flow.fn.__name__ == NIGHTLY_FLOW
    entries = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
    assert {e["entrypoint"] for e in entries} == {f"flows/nightly.py:{NIGHTLY_FLOW}"}


def test_the_ephemeral_api_gets_time_to_start_unless_the_person_says_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prefect's 20 s deadline for its ephemeral server failed a whole night before it began: a
    new venv's first run beside other work took longer to answer."""
    from sparkcap.settings import EPHEMERAL_STARTUP_TIMEOUT_S, prepare_prefect_env

    name = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
    monkeypatch.setenv("SPARKCAP_HOME", str(tmp_path / "home"))
    for var in ("PREFECT_HOME", name):
        monkeypatch.setenv(var, "x")  # so that monkeypatch restores what was there
        monkeypatch.delenv(var)
    prepare_prefect_env()
    assert os.environ[name] == str(EPHEMERAL_STARTUP_TIMEOUT_S) and EPHEMERAL_STARTUP_TIMEOUT_S > 20
    monkeypatch.setenv(name, "45")
    prepare_prefect_env()
    assert os.environ[name] == "45"
