"""One night, one object: a launched server starts once and serves every step, so the probes
meet the server the sweep measured, at the endpoint the run recorded."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
import yaml

from sparkcap.night import plan as night_plan
from sparkcap.night import steps as pipeline
from sparkcap.servers import llama as localserver
from tests.integration.helpers import RELAXED_TIMING

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_night_launches_its_servers_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    starts: list[dict[str, str]] = []
    real = localserver.launched

    @contextlib.contextmanager
    def counted(fleet: Any) -> Iterator[dict[str, str]]:
        with real(fleet) as endpoints:
            starts.append(dict(endpoints))
            yield endpoints

    monkeypatch.setattr(night_plan, "launched", counted)  # where a night looks it up
    # 12-token streams: about launching servers once, not the client's timing
    monkeypatch.setenv("SPARKCAP_DBT_VARS", RELAXED_TIMING["SPARKCAP_DBT_VARS"])
    fleet_file = tmp_path / "once.yaml"
    fleet_file.write_text(
        yaml.safe_dump(
            {
                "name": "once",
                "workloads": {
                    "code": {"levels": [1, 2], "trials": 1, "max_tokens": 12, "warmup": False}
                },
                "deployments": [
                    {
                        "name": "glm",
                        "model": "glm",
                        "launch": {"kind": "sim"},
                        "extra_body": {"ignore_eos": True},
                        "probes": {"prompt-cache": {"document_tokens": 400, "warm_requests": 1}},
                    }
                ],
            }
        )
    )
    db = tmp_path / "n.duckdb"
    fleet = night_plan.fleet_for(fleet_file)
    result = pipeline.run_pipeline(fleet, db, tmp_path / "reports")
    assert len(starts) == 1, starts  # sweep and probes shared one launch
    assert result["run_status"] == "complete" and not result["gaps"], result
    with duckdb.connect(str(db), read_only=True) as con:
        recorded = con.execute(
            "select endpoint from raw.deployments where run_id = ?", [result["run_id"]]
        ).fetchall()
        used = con.execute(
            "select distinct probe is null, endpoint from raw.waves where run_id = ?",
            [result["run_id"]],
        ).fetchall()
    assert recorded == [(starts[0]["glm"],)]
    assert {e for _, e in used} == {starts[0]["glm"]}
    assert {p for p, _ in used} == {True, False}  # sweep waves and probe waves
