"""A landing zone of Parquet files between many load-generating processes and one warehouse.

DuckDB takes one writer, so the workers of a distributed night (``sparkcap.night.distributed``)
never open it: each child sweep writes every finished wave to the lake as one Parquet part per raw
table, hive-partitioned,

    <lake>/raw/<table>/night=<date>/deployment=<name>/run_id=<run>/part-<wave>.parquet

then a manifest of the wave (each part's path, row count, byte size and SHA-256)

    <lake>/manifests/night=<date>/deployment=<name>/run_id=<run>/wave-<wave>.json

Every file is written under a temporary name and renamed, and the manifest comes last: a wave
is in the lake when its manifest is, and a child killed halfway through a wave leaves parts
without a manifest, which are never staged. Each child also keeps a status file (started,
finished, why it failed, which client host ran it) and a heartbeat beside the manifests, from
which the parent tells a running child from a lost one.

The parent of the night is the only writer: ``stage_lake`` verifies each manifest (the parts
exist, their checksums and row counts match) and stages verified waves through the same
``stage_tables`` as the local spool, in batches of whole waves, one transaction per batch; a
wave that fails verification is named, not staged. Staging skips waves the warehouse already
holds, so staging the lake again (after a crash of the parent, or by ``sparkcap stage
--lake``) stores each wave once.

The lake is any fsspec URL: a shared folder here, object storage (``s3://…``) where a user has
it and its fsspec driver installed.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from sparkcap.errors import LakeError
from sparkcap.loadgen.records import WaveRecord
from sparkcap.store.arrow_tables import metrics_table, wave_tables
from sparkcap.store.connection import open_warehouse
from sparkcap.store.spool import TABLES, safe_name
from sparkcap.store.staging import stage_tables

REQUIRED = ("waves", "requests", "chunks")  # a wave without these is not a wave


def _value(text: str) -> str:
    """A hive partition value or file stem: readable, and safe in any path or URL."""
    return quote(safe_name(text), safe="-_.=")


def partition(night: str, deployment: str, run_id: str) -> str:
    return f"night={_value(night)}/deployment={_value(deployment)}/run_id={_value(run_id)}"


# a child's attempts: the parent gives a child back to the pool once at most
ATTEMPTS = (1, 2)


@dataclass(frozen=True)
class ChildKey:
    """One child sweep of a distributed night: a deployment × workload of one run."""

    night: str
    run_id: str
    deployment: str
    workload: str

    @property
    def partition(self) -> str:
        return partition(self.night, self.deployment, self.run_id)


@dataclass
class LakeWave:
    """A wave's manifest as read back from the lake."""

    wave_id: str
    deployment: str
    workload: str
    path: str
    tables: dict[str, dict[str, Any]]
    written_at: float = 0.0
    # why the manifest cannot be staged (unreadable, a field of the wrong type); None: it
    # reads. A bad manifest costs its own wave, never the run's other waves
    problem: str | None = None


@dataclass
class StagedLake:
    staged: int = 0
    already: int = 0
    rejected: dict[str, str] = field(default_factory=dict)  # wave id -> why
    rejected_by_deployment: dict[str, list[str]] = field(default_factory=dict)


class Lake:
    def __init__(self, url: str | Path) -> None:
        self.url = str(url)
        try:
            self.fs, root = fsspec.core.url_to_fs(self.url)
        except (ImportError, ValueError) as exc:
            raise LakeError(f"lake {self.url}: {exc}") from None
        self.root = str(root).rstrip("/")

    def _path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def _put(self, path: str, data: bytes) -> None:
        """Write under a temporary name in the same folder, then rename: a reader (the parent)
        sees the whole file or none of it."""
        folder, name = path.rsplit("/", 1)
        tmp = f"{folder}/.tmp-{uuid.uuid4().hex}-{name}"
        try:
            self.fs.makedirs(folder, exist_ok=True)
            with self.fs.open(tmp, "wb") as fh:
                fh.write(data)
            self.fs.mv(tmp, path)
        except OSError as exc:
            # a full or read-only lake keeps no half-written file behind
            with contextlib.suppress(OSError):
                self.fs.rm_file(tmp)
            raise LakeError(f"lake {self.url}: cannot write {path}: {exc}") from None

    def _get(self, path: str) -> bytes:
        with self.fs.open(path, "rb") as fh:
            data: bytes = fh.read()
            return data

    # -- what a child writes -------------------------------------------------------------

    def write_wave(self, key: ChildKey, wave: WaveRecord) -> dict[str, Any]:
        """The wave's parts, then its manifest; returns the manifest."""

        tables = {**wave_tables(wave), "server_metrics": metrics_table(wave)}
        return self.write_tables(key, wave.wave_id, tables)

    def write_tables(
        self, key: ChildKey, wave_id: str, tables: dict[str, pa.Table]
    ) -> dict[str, Any]:
        """One wave's raw tables (those it has of ``TABLES``) as parts, then the manifest."""
        stem = _value(wave_id)
        entries: dict[str, dict[str, Any]] = {}
        for name in TABLES:
            if name not in tables:
                continue
            buf = io.BytesIO()
            pq.write_table(tables[name], buf, compression="zstd")
            data = buf.getvalue()
            rel = f"raw/{name}/{key.partition}/part-{stem}.parquet"
            self._put(self._path(rel), data)
            entries[name] = {
                "path": rel,
                "rows": tables[name].num_rows,
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
        manifest = {
            "wave_id": wave_id,
            "run_id": key.run_id,
            "deployment": key.deployment,
            "workload": key.workload,
            "written_at": time.time(),
            "tables": entries,
        }
        self._put(
            self._path("manifests", key.partition, f"wave-{stem}.json"),
            json.dumps(manifest, sort_keys=True).encode(),
        )
        return manifest

    def _status_path(self, key: ChildKey, suffix: str) -> str:
        return self._path("manifests", key.partition, f"child-{_value(key.workload)}.{suffix}")

    def write_status(self, key: ChildKey, **status: Any) -> None:
        """The child's own account: ``state`` (running/ok/failed), ``reason``, ``host``."""
        body = {"workload": key.workload, "deployment": key.deployment, **status}
        self._put(self._status_path(key, "json"), json.dumps(body, sort_keys=True).encode())

    def _beat_path(self, key: ChildKey, attempt: int) -> str:
        # attempt 1 keeps the name lakes of earlier versions have, for a later ``--finish``
        return self._status_path(key, "heartbeat" if attempt == 1 else f"a{attempt}.heartbeat")

    def heartbeat(self, key: ChildKey, attempt: int = 1) -> None:
        """Each attempt beats in a file of its own: the parent judges a child given back by
        the second attempt's silence alone, never by the beat the first left behind."""
        # the time is in the file, not its mtime: object stores do not all keep one
        self._put(self._beat_path(key, attempt), str(time.time()).encode())

    def _stand_down_path(self, key: ChildKey, attempt: int) -> str:
        return self._status_path(key, f"a{attempt}.stand-down")

    def stand_down(self, key: ChildKey, attempt: int) -> None:
        """The parent's word to an attempt it gives up on (``is_stood_down``)."""
        self._put(self._stand_down_path(key, attempt), b"")

    def is_stood_down(self, key: ChildKey, attempt: int) -> bool:
        """Whether the parent has given this attempt up. A child beats, then asks; the parent
        says so, then reads the beat: whichever writes second sees the other's write, so an
        attempt the parent gives back without having seen a beat never sends a request, and a
        child never measures twice (it did once, under load: given back while its first
        process was still starting, it ran on both hosts)."""
        return bool(self.fs.exists(self._stand_down_path(key, attempt)))

    # -- what the parent reads -----------------------------------------------------------

    def read_status(self, key: ChildKey) -> dict[str, Any] | None:
        """The child's account (None: it wrote none). Any process may have written the lake:
        a status that is not a JSON object is the child's failure with that reason, and a
        ``host`` that is not plain text is not shown."""
        try:
            raw = self._get(self._status_path(key, "json"))
        except FileNotFoundError:
            return None
        try:
            status = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            status = None
        if not isinstance(status, dict):
            return {"state": "failed", "reason": "its status in the lake is not a JSON object"}
        host = status.get("host")
        if host is not None and not (isinstance(host, str) and _is_plain(host)):
            status = {**status, "host": "?"}
        return status

    def heartbeat_age_s(self, key: ChildKey, attempt: int | None = None) -> float | None:
        """Seconds since the attempt's last beat (``attempt`` None: the youngest beat of any
        attempt, what ``--finish`` asks); None where it never beat, or where the file holds no
        time (it then reads as a child that never beat, never as a traceback)."""
        if attempt is None:
            ages = [a for n in ATTEMPTS if (a := self.heartbeat_age_s(key, n)) is not None]
            return min(ages, default=None)
        try:
            raw = self._get(self._beat_path(key, attempt))
        except FileNotFoundError:
            return None
        try:
            beat = float(raw)
        except (ValueError, UnicodeDecodeError):
            return None
        if beat != beat or beat in (float("inf"), float("-inf")):
            return None
        return time.time() - beat

    def waves(self, run_id: str) -> list[LakeWave]:
        """Every wave manifest of a run, in the order written."""
        pattern = self._path("manifests", "night=*", "deployment=*", f"run_id={_value(run_id)}")
        out: list[LakeWave] = []
        for path in self.fs.glob(pattern + "/wave-*.json"):
            out.append(_manifest(path, self._get(path)))
        return sorted(out, key=lambda w: (w.written_at, w.wave_id))

    def read_wave(self, wave: LakeWave) -> dict[str, pa.Table]:
        """The wave's tables, each checked against its manifest; ``LakeError`` says which
        part is missing or differs."""
        if wave.problem is not None:
            raise LakeError(f"{wave.path}: {wave.problem}")
        tables: dict[str, pa.Table] = {}
        for name in TABLES:
            entry = wave.tables.get(name)
            if entry is None:
                if name in REQUIRED:
                    raise LakeError(f"wave {wave.wave_id}: manifest lists no {name} part")
                continue
            if not (
                isinstance(entry, dict)
                and isinstance(entry.get("path"), str)
                and isinstance(entry.get("sha256"), str)
                and type(entry.get("rows")) is int
            ):
                raise LakeError(f"wave {wave.wave_id}: its manifest's {name} entry is malformed")
            try:
                data = self._get(self._path(entry["path"]))
            except FileNotFoundError:
                raise LakeError(f"wave {wave.wave_id}: {name} part is missing") from None
            if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                raise LakeError(f"wave {wave.wave_id}: {name} part fails its checksum")
            table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
            if table.num_rows != entry["rows"]:
                raise LakeError(
                    f"wave {wave.wave_id}: {name} part has {table.num_rows} rows, "
                    f"manifest says {entry['rows']}"
                )
            # a second manifest naming another wave's parts would stage its rows twice
            if "wave_id" in table.column_names and table.num_rows:
                ids = set(table.column("wave_id").unique().to_pylist())
                if ids != {wave.wave_id}:
                    shown = ", ".join(sorted(str(i) for i in ids))[:200]
                    raise LakeError(
                        f"wave {wave.wave_id}: its {name} part holds the rows of wave {shown}"
                    )
            tables[name] = table
        return tables


def _is_plain(text: str) -> bool:
    """No control character: text from the lake that reaches a terminal or a log line."""
    return not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text)


def _manifest(path: str, raw: bytes) -> LakeWave:
    """A manifest as written by ``write_tables``, or a ``LakeWave`` carrying the problem (a
    truncated file, a field of the wrong type): one bad manifest costs its wave only."""
    stem = path.rsplit("/", 1)[-1].removeprefix("wave-").removesuffix(".json")
    deployment = next(
        (p.removeprefix("deployment=") for p in path.split("/") if p.startswith("deployment=")),
        "?",
    )
    try:
        m = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return LakeWave(stem, deployment, "?", path, {}, problem="manifest is not valid JSON")
    if not isinstance(m, dict):
        return LakeWave(stem, deployment, "?", path, {}, problem="manifest is not a JSON object")
    fields = (m.get("wave_id"), m.get("deployment"), m.get("workload"))
    written_at = m.get("written_at", 0.0)
    if (
        not all(isinstance(f, str) and f for f in fields)
        or not isinstance(m.get("tables"), dict)
        or isinstance(written_at, bool)
        or not isinstance(written_at, int | float)
    ):
        return LakeWave(
            stem, deployment, "?", path, {}, problem="manifest lacks its fields or has wrong types"
        )
    wave_id, dep, workload = (str(f) for f in fields)
    return LakeWave(wave_id, dep, workload, path, m["tables"], float(written_at))


def stage_lake(db_path: Path, lake: Lake, run_id: str, batch_rows: int = 2_000_000) -> StagedLake:
    """Stage a run's verified waves from the lake into the warehouse (the one writer); waves
    already there are left alone, waves that fail verification are named and left out. Waves
    are staged in batches (about ``batch_rows`` chunk rows, one transaction each: a batch is
    staged whole or not at all, so never half a wave); one transaction per wave would cost a
    100-deployment night most of its staging time. The run's row must exist (the parent
    writes it before fanning out)."""

    out = StagedLake()
    waves = lake.waves(run_id)
    with open_warehouse(db_path) as con:
        if con.execute("select 1 from raw.runs where run_id = ?", [run_id]).fetchone() is None:
            raise LakeError(f"no run {run_id} in {db_path}: the lake's waves have no run to join")
        have = {
            r[0]
            for r in con.execute(
                "select wave_id from raw.waves where run_id = ?", [run_id]
            ).fetchall()
        }
        batch: list[tuple[str, dict[str, pa.Table]]] = []

        def flush() -> None:
            if not batch:
                return
            merged = {
                name: pa.concat_tables(parts, promote_options="permissive")
                for name in TABLES
                if (parts := [t[name] for _, t in batch if name in t])
            }
            stage_tables(con, [w for w, _ in batch], merged, merged.get("server_metrics"))
            out.staged += len(batch)
            batch.clear()

        rows = 0
        for wave in waves:
            if wave.wave_id in have:
                out.already += 1
                continue
            try:
                tables = lake.read_wave(wave)
            except (LakeError, OSError, pa.ArrowInvalid) as exc:
                out.rejected[wave.wave_id] = str(exc)
                out.rejected_by_deployment.setdefault(wave.deployment, []).append(str(exc))
                continue
            have.add(wave.wave_id)
            batch.append((wave.wave_id, tables))
            rows += tables["chunks"].num_rows
            if rows >= batch_rows:
                flush()
                rows = 0
        flush()
    return out
