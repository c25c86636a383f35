"""Data quality reads its frames from dbt's models: the TTFT and failure rate it judges are the
ones the marts hold, and nothing that depends on data-quality results feeds them."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import duckdb
import pytest

from sparkcap import resources
from sparkcap.dq.validate import DQ_MODELS, build_frames, run_validation
from sparkcap.store.runs import run_end_to, run_start_to
from sparkcap.store.staging import stage_wave_to
from sparkcap.transform.dbt_build import _parsed_manifest, dbt_args
from tests.support.queries import q
from tests.support.waves import add_ok_stream, wave_record

pytestmark = pytest.mark.integration

RUN_ID = "20260101T000000Z-dqview"


def stage_night(db_path: Path) -> list[str]:
    """One run, one level of two streams in a warm-up and one trial; the request ids."""
    run_start_to(db_path, RUN_ID, {}, time.time_ns())
    ids = []
    for trial in (0, 1):
        wave = wave_record(
            2, trial, run_id=RUN_ID, started_at_ns=1_700_000_000_000_000_000 + trial * 10**10
        )
        for _ in range(2):
            ids.append(add_ok_stream(wave, 16, 200_000_000, 1_000_000_000).request_id)
        stage_wave_to(db_path, wave)
    run_end_to(db_path, RUN_ID, "complete")
    return ids


def test_validation_judges_the_ttft_the_stream_rates_model_holds(
    db_path: Path, tmp_path: Path
) -> None:
    """A TTFT beyond the timeout and a failed stream in int_stream_rates (written there by
    hand, as a changed formula would put them) fail ttft_within_timeout for exactly that
    request and failure_rate_under_ceiling for exactly that wave: validation has no formula of
    its own to disagree with the models (raw says every stream was fine)."""
    ids = stage_night(db_path)
    build_frames(db_path)
    with duckdb.connect(str(db_path)) as con:
        con.execute(
            "update intermediate.int_stream_rates set ttft_s = 4000 where request_id = ?", [ids[3]]
        )
        con.execute(
            "update intermediate.int_stream_rates set status = 'rejected' where request_id = ?",
            [ids[2]],
        )
    # the shipped suites, read from a folder of the caller's with one expectation added: a
    # night can be held to a suite of its own (expectations_dir)
    suites = tmp_path / "suites"
    shutil.copytree(resources.expectations_dir(), suites)
    requests = json.loads((suites / "requests.json").read_text())
    requests["expectations"].append(
        {
            "id": "read_from_the_given_folder",
            "type": "ExpectColumnValuesToNotBeNull",
            "kwargs": {"column": "request_id"},
            "blocking": True,
            "why": "only in this test's copy of the suites",
        }
    )
    (suites / "requests.json").write_text(json.dumps(requests))
    result = run_validation(db_path, RUN_ID, docs_dir=tmp_path / "dq", expectations_dir=suites)
    (added,) = [o for o in result.outcomes if o.expectation == "read_from_the_given_folder"]
    assert added.success and added.suite == "requests"
    (ttft,) = [o for o in result.outcomes if o.expectation == "ttft_within_timeout"]
    assert not ttft.success and ttft.sample_ids == [ids[3]]
    (rate,) = [o for o in result.outcomes if o.expectation == "failure_rate_under_ceiling"]
    assert not rate.success and rate.sample_ids == [f"{RUN_ID}/d/code/c2/t1"]


def test_the_frames_read_no_data_quality_result(db_path: Path) -> None:
    """Validation builds its views before the night's build and the trials' verdict reads its
    results: the views' parents may reach raw.dq_results only through int_run_watermarks (which
    picks the runs to rebuild, never a value), never through the trials' verdict."""
    stage_night(db_path)
    build_frames(db_path)
    # the manifest the build ran with (dbt writes no manifest.json: --no-write-json)
    manifest = _parsed_manifest(dbt_args("run", db_path))
    parents = {uid: list(node.depends_on.nodes) for uid, node in manifest.nodes.items()}
    seen: set[str] = set()
    todo = [f"model.sparkcap.{name}" for name in DQ_MODELS]
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo += parents.get(node, [])
    models = {n.rsplit(".", 1)[1] for n in seen if n.startswith("model.")}
    assert models == {
        "int_dq_requests",
        "int_dq_waves",
        "int_stream_rates",
        "int_run_watermarks",
        "stg_requests",
        "stg_waves",
        "stg_deployments",
        "stg_chunks",
        "stg_dq_results",
    }
    readers = {n for n in seen if "model.sparkcap.stg_dq_results" in parents.get(n, [])}
    assert readers == {"model.sparkcap.int_run_watermarks"}
    built = q(
        db_path,
        "select table_name, table_type from information_schema.tables "
        "where table_name in ('int_dq_requests', 'int_dq_waves', 'int_trials') order by 1",
    )
    assert built == [("int_dq_requests", "VIEW"), ("int_dq_waves", "VIEW")]  # nothing more
