"""The lake: what a child writes is what the parent stages, verified, once."""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparkcap.config.plan import SweepPlan
from sparkcap.errors import LakeError
from sparkcap.loadgen.records import WaveRecord
from sparkcap.loadgen.sweep import new_run_id, run_sweep
from sparkcap.servers.sim.server import SimServer
from sparkcap.store import spool
from sparkcap.store.lake import TABLES, ChildKey, Lake, stage_lake
from sparkcap.store.runs import run_start_to
from tests.support.queries import q
from tests.support.sims import dep, fast_profile

pytestmark = pytest.mark.integration


@dataclass
class Measured:
    """Three waves a child measured, and how a test lands and stages them."""

    endpoint: str
    waves: list[WaveRecord]

    @property
    def run_id(self) -> str:
        return self.waves[0].run_id

    @property
    def key(self) -> ChildKey:
        return ChildKey("2026-11-30", self.run_id, "m", "code")

    def warehouse(self, db: Path) -> Path:
        """A warehouse holding the run's row, as the parent writes it before fanning out."""
        run_start_to(db, self.run_id, {}, time.time_ns(), [dep(self.endpoint)])
        return db


@pytest.fixture(scope="module")
def measured() -> Measured:
    with SimServer([fast_profile("m")]) as sim:
        plan = SweepPlan(levels=(1, 2, 3), trials=1, warmup=False, max_tokens=24)
        waves = asyncio.run(run_sweep(dep(sim.endpoint), "code", plan, new_run_id()))
    return Measured(sim.endpoint, waves)


def _rows(db: Path, table: str) -> list[tuple]:  # type: ignore[type-arg]
    """A raw table's rows, but when they were staged."""
    cols = "* exclude (staged_at)" if table == "waves" else "*"
    return q(db, f"select {cols} from raw.{table} order by all")


def test_lake_waves_stage_exactly_like_the_spool(
    measured: Measured,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Parquet parts carry every column and type the spool's Arrow files do: the two
    warehouses hold the same raw rows, and staging the lake again adds nothing."""
    monkeypatch.setenv("SPARKCAP_HOME", str(tmp_path / "home"))
    waves, run_id, key = measured.waves, measured.run_id, measured.key
    lake = Lake(tmp_path / "lake")
    for db in (tmp_path / "lake.duckdb", tmp_path / "spool.duckdb"):
        measured.warehouse(db)
    for w in waves:
        lake.write_wave(key, w)
        spool.write_wave(w, tmp_path / "spool.duckdb")
    assert spool.stage_spool(tmp_path / "spool.duckdb") == len(waves)
    first = stage_lake(tmp_path / "lake.duckdb", lake, run_id)
    assert (first.staged, first.already, first.rejected) == (len(waves), 0, {})
    for table in TABLES:
        assert _rows(tmp_path / "lake.duckdb", table) == _rows(tmp_path / "spool.duckdb", table)
    again = stage_lake(tmp_path / "lake.duckdb", lake, run_id)
    assert (again.staged, again.already) == (0, len(waves))
    assert len(_rows(tmp_path / "lake.duckdb", "waves")) == len(waves)
    # the layout the issue names: hive partitions per table, manifests beside
    parts = sorted((tmp_path / "lake" / "raw" / "chunks").rglob("*.parquet"))
    assert len(parts) == len(waves)
    assert parts[0].parent.relative_to(tmp_path / "lake" / "raw" / "chunks").as_posix() == (
        f"night=2026-11-30/deployment=m/run_id={run_id}"
    )
    assert not list((tmp_path / "lake").rglob(".tmp-*"))


def test_a_damaged_or_unfinished_wave_is_named_never_staged(
    measured: Measured,
    tmp_path: Path,
) -> None:
    waves, run_id, key = measured.waves, measured.run_id, measured.key
    lake = Lake(tmp_path / "lake")
    db = measured.warehouse(tmp_path / "w.duckdb")
    good, damaged, unfinished = waves[0], waves[1], waves[2]
    lake.write_wave(key, good)
    manifest = lake.write_wave(key, damaged)
    part = tmp_path / "lake" / manifest["tables"]["chunks"]["path"]
    part.write_bytes(part.read_bytes()[:-8] + b"\0" * 8)
    # a child killed between its parts and its manifest: parts on disk, no manifest
    lake.write_wave(key, unfinished)
    stem = unfinished.wave_id.replace("/", "__")
    next((tmp_path / "lake" / "manifests").rglob(f"wave-{stem}.json")).unlink()
    result = stage_lake(db, lake, run_id)
    assert result.staged == 1
    assert list(result.rejected) == [damaged.wave_id]
    assert "chunks part fails its checksum" in result.rejected[damaged.wave_id]
    assert result.rejected_by_deployment == {"m": [result.rejected[damaged.wave_id]]}
    assert [r[0] for r in _rows(db, "waves")] == [good.wave_id]
    ((n,),) = q(db, "select count(*) from raw.requests")
    assert n == good.concurrency


@pytest.mark.reliability
def test_a_hostile_lake_file_costs_its_wave_or_child_never_the_run(
    measured: Measured, tmp_path: Path
) -> None:
    """A truncated manifest, a second manifest naming the same parts under another wave id,
    a status file holding ``[]`` and a heartbeat of text in ``run --finish`` each cost only
    their wave or child, with the reason: never an exception that stages nothing (the good
    wave included), and never the same rows staged twice."""
    waves, run_id, key = measured.waves, measured.run_id, measured.key
    lake = Lake(tmp_path / "lake")
    db = measured.warehouse(tmp_path / "w.duckdb")
    good, truncated, copied = waves[0], waves[1], waves[2]
    lake.write_wave(key, good)
    lake.write_wave(key, truncated)
    stem = truncated.wave_id.replace("/", "__")
    path = next((tmp_path / "lake" / "manifests").rglob(f"wave-{stem}.json"))
    path.write_bytes(path.read_bytes()[:40])
    # the good wave's parts again, under another wave id
    manifest = lake.write_wave(key, copied)
    forged = {**manifest, "tables": lake.write_wave(key, good)["tables"]}
    copy_path = next(
        (tmp_path / "lake" / "manifests").rglob(f"wave-{copied.wave_id.replace('/', '__')}.json")
    )
    copy_path.write_text(json.dumps(forged))
    result = stage_lake(db, lake, run_id)
    assert result.staged == 1, result
    (unreadable,) = [w for w in result.rejected if w != copied.wave_id]  # named by its file
    assert len(result.rejected) == 2 and stem in unreadable, result.rejected
    assert "manifest is not valid JSON" in result.rejected[unreadable]
    assert f"holds the rows of wave {good.wave_id}" in result.rejected[copied.wave_id]
    ((n,),) = q(db, "select count(*) from raw.requests")
    assert n == good.concurrency  # once, not twice
    status = tmp_path / "lake" / "manifests" / key.partition / "child-code.json"
    beat = status.with_suffix(".heartbeat")
    for body in (b"[]", b'{"state": "ok"', b"\xff"):
        status.write_bytes(body)
        assert lake.read_status(key) == {
            "state": "failed",
            "reason": "its status in the lake is not a JSON object",
        }
    status.write_text(json.dumps({"state": "ok", "host": "a\x1b[2Jb"}))
    assert lake.read_status(key) == {"state": "ok", "host": "?"}
    for body in (b"soon", b"nan", b"\xff"):
        beat.write_bytes(body)
        assert lake.heartbeat_age_s(key) is None


def test_the_lake_is_any_fsspec_url(
    measured: Measured,
    tmp_path: Path,
) -> None:
    waves, run_id, key = measured.waves, measured.run_id, measured.key
    lake = Lake(f"memory://lake-{run_id}")
    for w in waves:
        lake.write_wave(key, w)
    lake.write_status(key, state="ok", host="h1")
    lake.heartbeat(key)
    assert lake.read_status(key) == {
        "deployment": "m",
        "host": "h1",
        "state": "ok",
        "workload": "code",
    }
    age = lake.heartbeat_age_s(key)
    assert age is not None and 0 <= age < 60
    assert stage_lake(measured.warehouse(tmp_path / "m.duckdb"), lake, run_id).staged == len(waves)


def test_staging_a_run_the_warehouse_does_not_hold_says_so(tmp_path: Path) -> None:
    with pytest.raises(LakeError, match="no run nope"):
        run_start_to(tmp_path / "w.duckdb", "other", {}, time.time_ns(), [])
        stage_lake(tmp_path / "w.duckdb", Lake(tmp_path / "lake"), "nope")


def test_sparkcap_stage_stages_a_lake_a_parent_left(
    measured: Measured,
    tmp_path: Path,
) -> None:
    """A parent that died after its children finished: the lake is staged by hand, once."""
    from tests.support.cli import cli_in_process

    waves, run_id = measured.waves, measured.run_id
    lake = Lake(tmp_path / "lake")
    for w in waves:
        lake.write_wave(measured.key, w)
    db = measured.warehouse(tmp_path / "w.duckdb")
    env = {**os.environ, "SPARKCAP_HOME": str(tmp_path / "home")}
    args = ("stage", "--db", str(db), "--lake", str(tmp_path / "lake"), "--run", run_id)
    first = cli_in_process(*args, env=env)
    assert first.returncode == 0, first.stderr
    assert f"staged {len(waves)} wave(s) of run {run_id}" in first.stdout
    again = cli_in_process(*args, env=env)
    assert f"staged 0 wave(s) of run {run_id}" in again.stdout
    assert f"({len(waves)} already there)" in again.stdout
    alone = cli_in_process("stage", "--db", str(db), "--lake", str(tmp_path / "lake"), env=env)
    assert alone.returncode != 0
    assert "--lake and --run go together" in alone.stderr
