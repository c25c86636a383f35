"""Fleet files a test writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkcap.config.fleet import load_fleet
from sparkcap.errors import FleetError


def write_fleet(path: Path, fleet: dict[str, Any]) -> Path:
    """``fleet`` as a fleet file at ``path`` (YAML, as a person writes one); the path."""
    path.write_text(yaml.safe_dump(fleet), encoding="utf-8")
    return path


def fleet_load_error(path: Path, text: str) -> str:
    """The message of the ``FleetError`` that loading ``text``, written as a fleet file at
    ``path``, raises (the test fails if the file loads or fails otherwise)."""
    path.write_text(text)
    with pytest.raises(FleetError) as err:
        load_fleet(path)
    return str(err.value)


def one_deployment_fleet(
    tmp_path: Path,
    name: str,
    endpoint: str,
    *,
    levels: list[int],
    trials: int,
    max_tokens: int,
    deployment: str = "m",
) -> Path:
    """A fleet file with one deployment of model ``m`` at ``endpoint`` and one code workload."""
    fleet = {
        "name": name,
        "workloads": {"code": {"levels": levels, "trials": trials, "max_tokens": max_tokens}},
        "deployments": [{"name": deployment, "model": "m", "endpoint": endpoint}],
    }
    return write_fleet(tmp_path / f"{name}.yaml", fleet)
