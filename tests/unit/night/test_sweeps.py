"""A probe's staging, apart from the network and the warehouse: a busy database delays it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from sparkcap.config.deployment import Deployment
from sparkcap.errors import WarehouseBusy
from sparkcap.night import sweeps


def test_a_probe_measured_while_the_database_is_busy_stays_in_the_spool(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The probe's measurement is whole and spooled: the night's stage step stages it later,
    as a sweep's wave. It failed the probe once (a Prefect night with a busy database)."""
    wave, folder = object(), tmp_path / "spool" / "wave-1"
    staged: list[str | None] = []

    async def reachable(_: Deployment) -> None:
        return None

    async def measured(*_: Any) -> object:
        return wave

    def stage(db: Path, root: Path | None = None, run_id: str | None = None) -> int:
        staged.append(run_id)
        if run_id is not None:  # the probe's own staging, after its measurement
            raise WarehouseBusy("database is busy")
        return 0

    monkeypatch.setattr(sweeps, "preflight", reachable)
    monkeypatch.setattr(sweeps, "scrape_into", lambda _: (None, None))
    monkeypatch.setitem(sweeps.PROBES, "prompt-cache", measured)
    monkeypatch.setattr(sweeps.spool, "write_wave", lambda w, db: folder)
    monkeypatch.setattr(sweeps.spool, "stage_spool", stage)
    dep = Deployment(name="m", endpoint="http://127.0.0.1:9/v1", model="m")

    result = asyncio.run(
        sweeps.run_probe(dep, "prompt-cache", tmp_path / "w.duckdb", run_id="r1", record_run=False)
    )

    assert staged == [None, "r1"]  # it tried, and the database was busy
    assert result.status != "incomplete" and result.waves == [wave]
    assert result.unstaged == [str(folder)]
