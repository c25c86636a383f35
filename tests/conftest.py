from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cli_sweeps import CliSweeps, run_cli_sweeps
from tests.integration.reliability.imperfect_nights import ImperfectNight, run_imperfect_night
from tests.support.timing import RELAXED_TIMING
from tests.twin import twin_night_for_session

# the folder markers, the xdist groups and their order, each test's CPU seconds
pytest_plugins = ["tests.support.scheduling"]

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
    if not any(request.node.get_closest_marker(m) for m in ("client_timing", "timing_rule")):
        # the one setting (tests.support.timing.RELAXED_TIMING), for this process and every
        # CLI, worker and dbt build it starts: a test that is not about the client's timing
        # never fails on it (beside the parallel suite a level's error bound can pass the
        # default tolerance). The twin night is judged with the same vars.
        monkeypatch.setenv("SPARKCAP_DBT_VARS", RELAXED_TIMING["SPARKCAP_DBT_VARS"])
    yield


@pytest.fixture(scope="session")
def twin_night(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The twin fleet through the whole pipeline once (demo profile): shared by the slow tests.
    ``make test`` builds it ahead of the tests, in a process of its own (``tests/twin.py``)."""
    return twin_night_for_session(tmp_path_factory.mktemp("twin"))


@pytest.fixture(scope="session")
def imperfect_cli_night(tmp_path_factory: pytest.TempPathFactory) -> ImperfectNight:
    """A dead node, a launched simulator, absurd usage, absurd /metrics and a canary API key
    in one CLI night (``tests/integration/reliability/imperfect_nights.py``): built once,
    read by the tests of each."""
    return run_imperfect_night(tmp_path_factory.mktemp("imperfect"))


@pytest.fixture(scope="session")
def cli_sweeps(tmp_path_factory: pytest.TempPathFactory) -> CliSweeps:
    """Hand-made sweeps into one warehouse, built by the CLI's own two sweeps
    (``tests/integration/cli_sweeps.py``): read by the combined-report, SQL, metrics and
    custom-header tests."""
    return run_cli_sweeps(tmp_path_factory.mktemp("cli-sweeps"))
