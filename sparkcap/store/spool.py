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

import contextlib
import logging
import os
import shutil
import uuid
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.ipc as ipc

from sparkcap.errors import StorageError, WarehouseBusy
from sparkcap.loadgen.records import WaveRecord
from sparkcap.settings import get_settings
from sparkcap.store.abandoned import mark_abandoned, mark_abandoned_to
from sparkcap.store.arrow_tables import metrics_table, wave_tables
from sparkcap.store.connection import open_warehouse, storage_error, warehouse_key
from sparkcap.store.staging import stage_tables, stage_wave

log = logging.getLogger(__name__)

TABLES = (
    "waves",
    "requests",
    "chunks",
    "server_metrics",
    "client_processes",
    "search_levels",
    "power_samples",
    "replay_offers",
)
# tables a spool written before they existed lacks: read as empty
_OPTIONAL = ("client_processes", "search_levels", "power_samples", "replay_offers")


def spool_root() -> Path:
    return get_settings().work_dir / "spool"


def safe_name(name: str) -> str:
    """A run or wave id as one path component."""
    return name.replace("/", "__")


def write_wave(wave: WaveRecord, db_path: Path | str, root: Path | None = None) -> Path:
    """Spool the wave (see the module's docstring). A spool that cannot take it (a full or
    read-only ``SPARKCAP_HOME``) leaves no partial folder, and the wave goes straight into
    its warehouse instead, with a warning; only when that fails too is the wave lost, and the
    :class:`StorageError` names it and both causes."""
    root = (root or spool_root()) / warehouse_key(db_path)
    final = root / safe_name(wave.run_id) / safe_name(wave.wave_id)
    tmp = final.parent / f".tmp-{uuid.uuid4().hex}"
    try:
        _write_folder(wave, db_path, root, tmp)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        spool_fault = storage_error(final.parent, "write the spool", exc)
        return _stage_unspooled(wave, db_path, str(spool_fault or exc), final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _write_folder(wave: WaveRecord, db_path: Path | str, root: Path, tmp: Path) -> None:
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


def _stage_unspooled(wave: WaveRecord, db_path: Path | str, spool_fault: str, final: Path) -> Path:
    lost = f"wave {wave.wave_id} of run {wave.run_id} is lost"
    try:
        with open_warehouse(db_path) as con:
            row = con.execute("select 1 from raw.runs where run_id = ?", [wave.run_id])
            known = row.fetchone() is not None
            if known:
                stage_wave(con, wave)
    except WarehouseBusy as exc:
        raise StorageError(f"{lost}: {spool_fault}; and {exc}") from None
    if not known:  # staged without its run, it would be an orphan
        raise StorageError(f"{lost}: {spool_fault}; and its run is not in {db_path}")
    log.warning("warning: %s; wave %s staged straight into %s", spool_fault, wave.wave_id, db_path)
    return final


def _read(folder: Path) -> tuple[str, dict[str, pa.Table]]:
    tables = {}
    for name in TABLES:
        if not (folder / f"{name}.arrow").exists() and name in _OPTIONAL:
            continue
        with pa.memory_map(str(folder / f"{name}.arrow"), "r") as src:
            tables[name] = ipc.open_file(src).read_all()
    wave_id = (folder / "wave_id").read_text(encoding="utf-8")
    waves = tables["waves"]
    if waves.num_rows != 1 or "run_id" not in waves.column_names:
        raise ValueError(f"waves.arrow holds {waves.num_rows} rows, not the wave's one")
    return wave_id, tables


def quarantine_root() -> Path:
    return get_settings().work_dir / "quarantine"


def _quarantine(folder: Path, db_path: Path | str, why: str) -> Path:
    """Move an unreadable wave out of the spool (never deleted: it is somebody's
    measurement, and the reason may be fixable), so that it stops blocking the rest."""
    target = quarantine_root() / warehouse_key(db_path) / folder.parent.name
    target.mkdir(parents=True, exist_ok=True)
    dest = target / f"{folder.name}-{uuid.uuid4().hex[:8]}"
    shutil.move(str(folder), dest)
    (dest / "why.txt").write_text(why + "\n", encoding="utf-8")
    return dest


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


# what reading a spooled wave may raise because of the wave itself (a damaged file, a member
# missing from a folder that is there): the wave is quarantined. So is one the warehouse
# refuses as data (a value or a table that does not fit). Anything else — the machine out of
# file handles or memory, an I/O error, the warehouse busy, full or read-only, Ctrl-C — is no
# fault of the wave: every wave is kept for the next stage.
_UNREADABLE = (
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    ValueError,
    KeyError,
    IndexError,
    UnicodeDecodeError,
    pa.ArrowInvalid,
    pa.ArrowTypeError,
)
_REFUSED_AS_DATA = (
    duckdb.ConversionException,
    duckdb.ConstraintException,
    duckdb.InvalidInputException,
    duckdb.BinderException,
    duckdb.TypeMismatchException,
    pa.ArrowInvalid,
    pa.ArrowTypeError,
)


def stage_spool(db_path: Path, root: Path | None = None, run_id: str | None = None) -> int:
    """Stage this warehouse's complete spooled waves (oldest first); return how many.

    A wave whose run has no row in the warehouse (a file replaced or restored since) stays in
    the spool rather than landing as an orphan without its run and deployment rows. A wave
    that cannot be read or staged is moved to ``$SPARKCAP_HOME/quarantine/`` with a warning
    naming it (and, when its run is known, a failed ``stage`` step on the run); the others are
    staged. Called for the whole warehouse (no ``run_id``: a run's start, ``sparkcap stage``),
    it also marks runs whose writer died as incomplete (``abandoned.mark_abandoned``).
    """
    folders = pending(db_path, root, run_id)
    if not folders:
        if run_id is None:
            mark_abandoned_to(db_path)
        return 0
    n = 0
    quarantined: dict[str, list[str]] = {}
    with open_warehouse(db_path) as con:
        if run_id is None:
            mark_abandoned(con, db_path)
        known = {r[0] for r in con.execute("select run_id from raw.runs").fetchall()}
        for folder in folders:
            try:
                wave_id, tables = _read(folder)
                wave_run = tables["waves"].column("run_id")[0].as_py()
            except _UNREADABLE as exc:
                if not folder.is_dir():
                    continue  # staged and removed by another process meanwhile: not damaged
                _set_aside(folder, db_path, exc, known, quarantined)
                continue
            except OSError as exc:  # the machine's fault, not the wave's: every wave is kept
                raise StorageError(f"cannot read the spooled wave {folder}: {exc}") from None
            if wave_run not in known:
                continue
            try:
                stage_tables(con, [wave_id], tables, tables["server_metrics"])
            except (duckdb.Error, pa.ArrowException) as exc:
                if (fault := storage_error(db_path, "use", exc)) is not None:
                    raise fault from None  # the warehouse's fault, not the wave's: kept
                if not isinstance(exc, _REFUSED_AS_DATA):
                    raise  # out of memory, interrupted, a bug: kept for the next stage
                _set_aside(folder, db_path, exc, known, quarantined)
                continue
            shutil.rmtree(folder)
            n += 1
        for owner, waves in quarantined.items():
            _record_quarantine(con, owner, waves)
    for parent in {f.parent for f in folders}:
        with contextlib.suppress(OSError):
            leftovers = [p for p in parent.iterdir() if not p.name.startswith(".tmp-")]
            if not leftovers:
                shutil.rmtree(parent, ignore_errors=True)
    return n


def _set_aside(
    folder: Path,
    db_path: Path | str,
    exc: BaseException,
    known: set[str],
    quarantined: dict[str, list[str]],
) -> None:
    why = f"{type(exc).__name__}: {(str(exc).strip() or '?').splitlines()[0][:300]}"
    try:
        dest = _quarantine(folder, db_path, why)
    except OSError as move_exc:  # left where it is; the other waves are still staged
        log.warning(
            "warning: spooled wave %s cannot be staged (%s) nor moved aside (%s)",
            folder,
            why,
            move_exc,
        )
        return
    log.warning("warning: spooled wave %s cannot be staged (%s): moved to %s", folder, why, dest)
    owner = _run_of(dest)
    if owner in known:
        quarantined.setdefault(owner, []).append(f"{folder.name} ({why}) -> {dest}")


def _run_of(folder: Path) -> str | None:
    """The run a spooled wave belongs to, as far as anything in it can still be read."""
    try:
        return (folder / "run_id").read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def _record_quarantine(con: duckdb.DuckDBPyConnection, run_id: str, waves: list[str]) -> None:
    """The run's outcome names its quarantined waves: a failed ``stage`` step, which keeps
    the waves an earlier stage of the same run already named."""
    earlier = con.execute(
        "select reason from raw.step_outcomes where run_id = ? and deployment is null "
        "and step = 'stage' and status = 'failed'",
        [run_id],
    ).fetchall()
    named = [w for (r,) in earlier if r for w in str(r).partition(": ")[2].split("; ") if w]
    waves = [*dict.fromkeys([*named, *waves])]
    reason = f"{len(waves)} spooled wave(s) could not be staged, moved aside: " + "; ".join(waves)
    con.execute("begin transaction")
    con.execute(
        "delete from raw.step_outcomes where run_id = ? and deployment is null and step = ?",
        [run_id, "stage"],
    )
    con.execute(
        "insert into raw.step_outcomes values (?, null, 'stage', 'failed', ?, ?)",
        [run_id, reason[:1000], datetime.now(UTC)],
    )
    con.execute("commit")
