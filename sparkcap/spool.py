"""A crash-safe spool between the load generator and the warehouse.

Every finished wave is first written to ``$SPARKCAP_HOME/spool/<warehouse>/<run>/<wave>/`` as
Arrow IPC files (written to a temporary folder, then renamed, so a wave folder is complete or
absent), then staged into DuckDB and removed. ``<warehouse>`` names the DuckDB file the wave was
measured for: one home serves several warehouses, and a wave is only ever staged into its own,
and only once that warehouse holds its run's row (with the run's deployments), or not at all.
If staging cannot happen — the database is held by another writer, the process is killed
mid-transaction — the measurement is not lost: the next ``stage_spool`` (run at the start of
every run, by the nightly flow's staging task, or by ``sparkcap stage``) loads what is left.
Staging is idempotent, so a wave staged twice is stored once.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from sparkcap.loadgen.records import WaveRecord
from sparkcap.settings import get_settings
from sparkcap.warehouse import metrics_table, open_warehouse, stage_tables, wave_tables

TABLES = ("waves", "requests", "chunks", "server_metrics", "client_processes", "search_levels")
_OPTIONAL = ("client_processes", "search_levels")  # absent from spools of sparkcap < 0.3 / 0.5


def spool_root() -> Path:
    return get_settings().work_dir / "spool"


def safe_name(name: str) -> str:
    """A run or wave id as one path component."""
    return name.replace("/", "__")


def warehouse_key(db_path: Path | str) -> str:
    """A folder name for one DuckDB file: readable stem plus a digest of its absolute path."""
    path = Path(db_path).resolve()
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", path.stem)[:40]
    return f"{stem}-{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"


def write_wave(wave: WaveRecord, db_path: Path | str, root: Path | None = None) -> Path:
    root = (root or spool_root()) / warehouse_key(db_path)
    final = root / safe_name(wave.run_id) / safe_name(wave.wave_id)
    tmp = final.parent / f".tmp-{uuid.uuid4().hex}"
    tmp.mkdir(parents=True, exist_ok=True)
    tables = {**wave_tables(wave), "server_metrics": metrics_table(wave)}
    for name in TABLES:
        with (
            pa.OSFile(str(tmp / f"{name}.arrow"), "wb") as sink,
            ipc.new_file(sink, tables[name].schema) as writer,
        ):
            writer.write_table(tables[name])
    (tmp / "wave_id").write_text(wave.wave_id, encoding="utf-8")
    (tmp / "run_id").write_text(wave.run_id, encoding="utf-8")
    (root / "warehouse").write_text(str(Path(db_path).resolve()), encoding="utf-8")
    for f in tmp.iterdir():
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    return final


def _read(folder: Path) -> tuple[str, dict[str, pa.Table]]:
    tables = {}
    for name in TABLES:
        if not (folder / f"{name}.arrow").exists() and name in _OPTIONAL:
            continue
        with pa.memory_map(str(folder / f"{name}.arrow"), "r") as src:
            tables[name] = ipc.open_file(src).read_all()
    return (folder / "wave_id").read_text(encoding="utf-8"), tables


def pending(db_path: Path | str, root: Path | None = None, run_id: str | None = None) -> list[Path]:
    """Complete wave folders spooled for this warehouse (oldest run first)."""
    root = (root or spool_root()) / warehouse_key(db_path)
    if not root.exists():
        return []
    runs = [root / safe_name(run_id)] if run_id else sorted(p for p in root.iterdir() if p.is_dir())
    out: list[Path] = []
    for r in runs:
        if r.exists():
            out.extend(sorted(p for p in r.iterdir() if p.is_dir() and not p.name.startswith(".")))
    return out


def stage_spool(db_path: Path, root: Path | None = None, run_id: str | None = None) -> int:
    """Stage this warehouse's complete spooled waves (oldest first); return how many.

    A wave whose run has no row in the warehouse (a file replaced or restored since) stays in
    the spool rather than landing as an orphan without its run and deployment rows.
    """
    folders = pending(db_path, root, run_id)
    if not folders:
        return 0
    n = 0
    with open_warehouse(db_path) as con:
        known = {r[0] for r in con.execute("select run_id from raw.runs").fetchall()}
        for folder in folders:
            wave_id, tables = _read(folder)
            if tables["waves"].column("run_id")[0].as_py() not in known:
                continue
            stage_tables(con, [wave_id], tables, tables["server_metrics"])
            shutil.rmtree(folder)
            n += 1
    for parent in {f.parent for f in folders}:
        leftovers = [p for p in parent.iterdir() if not p.name.startswith(".tmp-")]
        if not leftovers:
            shutil.rmtree(parent, ignore_errors=True)
    return n
