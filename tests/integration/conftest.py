from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def twin_night(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """The twin fleet through the whole pipeline once (demo profile): shared by the slow tests."""
    from sparkcap import pipeline

    base = tmp_path_factory.mktemp("twin")
    mp = pytest.MonkeyPatch()
    mp.setenv("SPARKCAP_HOME", str(base / "home"))
    try:
        fleet = pipeline.fleet_for(ROOT / "fleets" / "twin.yaml", "demo")
        db = base / "twin.duckdb"
        reports = base / "reports"
        result = pipeline.run_pipeline(fleet, db, reports)
        yield {
            "db": db,
            "run_id": result["run_id"],
            "reports": reports,
            "report": Path(str(result["report"])),
            "dq_success": result["dq_success"],
        }
    finally:
        mp.undo()
