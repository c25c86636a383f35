"""Where the parts sparkcap runs (dbt project, expectation suites, the nightly flow, fleets) live.

They are edited as top-level folders of the repository (``dbt/``, ``expectations/``, ``flows/``,
``fleets/``) and shipped inside the package as ``sparkcap/_project/<name>`` (``pyproject.toml``
maps them), so ``pip install sparkcap`` carries them. Both places are found through
``importlib.resources``: the wheel's copy first, then, for a source checkout (an editable
install), the folder beside the package. Nothing else in sparkcap builds these paths.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from sparkcap.errors import MissingFile

PARTS = ("dbt", "expectations", "flows", "fleets")


def part_dir(name: str) -> Path:
    if name not in PARTS:
        raise ValueError(f"unknown part {name!r} (one of {', '.join(PARTS)})")
    package = Path(str(importlib.resources.files("sparkcap")))
    for candidate in (package / "_project" / name, package.parent / name):
        if candidate.is_dir():
            return candidate
    raise MissingFile(
        f"sparkcap's {name}/ folder is missing from {package} (broken install: reinstall sparkcap)"
    )


def dbt_project_dir() -> Path:
    return part_dir("dbt")


def expectations_dir() -> Path:
    return part_dir("expectations")


def nightly_flow_file() -> Path:
    return part_dir("flows") / "nightly.py"


def bundled_fleet(name: str) -> Path:
    """A fleet file shipped with sparkcap (``twin`` is the demo's)."""
    return part_dir("fleets") / f"{name}.yaml"
