"""prefect.yaml is generated from the fleet files' schedules: one source of truth."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sparkcap.night.schedule import prefect_yaml
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
