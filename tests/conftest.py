from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("DO_NOT_TRACK", "1")
if os.environ.get("PREFECT_HOME"):  # Prefect will not create missing parent folders
    Path(os.environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "wh" / "sparkcap.duckdb"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("SPARKCAP_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPARKCAP_DB", raising=False)
    yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test carries its folder's marker (``-m unit``, ``-m integration``, ``-m e2e``)."""
    for item in items:
        parts = Path(str(item.path)).parts
        for kind in ("unit", "integration", "e2e"):
            if kind in parts:
                item.add_marker(kind)
