from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pytest.nodeid import coerce_node_id

from tests.integration.helpers import RELAXED_TIMING, TWIN_TRIALS
from tests.paths import ROOT

os.environ.setdefault("DO_NOT_TRACK", "1")
if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("PREFECT_HOME"):
    # each pytest-xdist worker its own Prefect database: ephemeral APIs of two workers on one
    # SQLite file lock each other out
    os.environ["PREFECT_HOME"] = str(
        Path(os.environ["PREFECT_HOME"]) / os.environ["PYTEST_XDIST_WORKER"]
    )
if os.environ.get("PREFECT_HOME"):  # Prefect will not create missing parent folders
    Path(os.environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "wh" / "sparkcap.duckdb"


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[None]:
    monkeypatch.setenv("SPARKCAP_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPARKCAP_DB", raising=False)
    if "twin_night" in request.fixturenames:
        # a test that builds the twin's warehouse again judges with the vars its night used
        monkeypatch.setenv("SPARKCAP_DBT_VARS", RELAXED_TIMING["SPARKCAP_DBT_VARS"])
    yield


@pytest.fixture(scope="session")
def twin_night(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """The twin fleet through the whole pipeline once (demo profile): shared by the slow tests."""
    from sparkcap.night import plan as night_plan
    from sparkcap.night import steps as pipeline

    base = tmp_path_factory.mktemp("twin")
    # Three trials per level, not the demo's one: GLM code at 4 streams sits ~6 % above the
    # threshold by design (the study's knife edge), and one 64-token wave on a busy CI machine
    # once read it 1 % below. The level median over trials is the study's method.
    fleet = night_plan.fleet_for(ROOT / "fleets" / "twin.yaml", "demo", trials=TWIN_TRIALS)
    db = base / "twin.duckdb"
    reports = base / "reports"
    with pytest.MonkeyPatch.context() as mp:  # for the night only: no later test inherits it
        mp.setenv("SPARKCAP_HOME", str(base / "home"))
        # the twin's capacities are about the fleet's design, not the client's timing: on a
        # machine running tests in parallel a 64-token wave's start skew can pass 5 % of its
        # decode span
        mp.setenv("SPARKCAP_DBT_VARS", RELAXED_TIMING["SPARKCAP_DBT_VARS"])
        result = pipeline.run_pipeline(fleet, db, reports)
    yield {
        "db": db,
        "run_id": result["run_id"],
        "reports": reports,
        "report": Path(str(result["report"])),
        "dq_success": result["dq_success"],
    }


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test carries its folder's marker (``-m unit``, ``-m integration``, ``-m e2e``).

    Tests that share one of our fixtures wider than a test (the twin night, a module's Prefect
    server, the llama-server) form one ``xdist_group``, joined transitively: under ``-n N
    --dist loadgroup`` they run on one worker, so each such fixture is built once, as in a
    serial run."""
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    keys_of: dict[int, list[str]] = {}
    for item in items:
        parts = Path(str(item.path)).parts
        for kind in ("unit", "integration", "e2e"):
            if kind in parts:
                item.add_marker(kind)
        keys = sorted(shared_fixtures(item))
        keys_of[id(item)] = keys
        for other in keys[1:]:
            parent[find(other)] = find(keys[0])
    # the real-server tests wait on the llama-server build that `make test` starts beside
    # them: the other slow groups first, so no worker idles on the build while there is work
    items.sort(key=_start_order)
    grouping = bool(getattr(config.option, "loadgroup", False))  # set on xdist workers
    for item in items:
        keys = keys_of[id(item)]
        if keys:
            group = find(keys[0]).replace("@", "_").replace("]", "_")
            item.add_marker(pytest.mark.xdist_group(group))
            if grouping and "@" not in item.nodeid:
                # pytest-xdist 3.8 groups by an "@group" suffix on the node id, which it sets
                # on ``item._nodeid``; pytest 9 reads ``item._id``, so the suffix is set here
                item._id = coerce_node_id(f"{item.nodeid}@{group}")


def _start_order(item: pytest.Item) -> int:
    """e2e and integration tests, then those on the real llama-server, then the unit tests
    (many and short: what fills the end of a parallel run); a stable sort keeps the rest."""
    if item.get_closest_marker("unit"):
        return 2
    return 1 if item.get_closest_marker("real_server") else 0


def shared_fixtures(item: pytest.Item) -> set[str]:
    """This project's fixtures, wider than one test, that the item uses (and the llama-server,
    which every ``real_server`` test starts from one cached build)."""
    info = getattr(item, "_fixtureinfo", None)
    found: set[str] = set()
    for name, defs in info.name2fixturedefs.items() if info else ():
        for fixturedef in defs:
            if fixturedef.scope != "function" and fixturedef.baseid.startswith("tests"):
                found.add(f"{fixturedef.baseid}::{name}")
    if item.get_closest_marker("real_server"):
        found.add("llama-server")
    return found
