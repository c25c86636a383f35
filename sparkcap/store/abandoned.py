"""Runs whose writer died: each writer's lock on its open run, and marking the dead ones.

A run is `running` from its start until its writer records the end. A writer killed with
kill -9 (or whose host lost power) never does, and no later process can tell from the row
alone whether the run is still being measured: a hand-made `sparkcap sweep` may write
between its waves while another reads, and a distributed night's parent holds its run
`running` for hours while its children sweep and never opens the warehouse meanwhile. So
each writer holds an advisory lock (flock) on a file of its own under
$SPARKCAP_HOME/runs/<warehouse>/<run>/ for as long as the run is open in it. The kernel
drops the lock when the process ends, however it ends; a run whose every lock file can be
taken has no live writer, and the next run's start or `sparkcap stage` marks it incomplete,
with the reason. A run with no lock file at all (written by a sparkcap before 0.5.1, or
under another SPARKCAP_HOME) is left as it is: nothing says its writer is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
from pathlib import Path
from typing import Any

import duckdb

from sparkcap.settings import get_settings
from sparkcap.store.connection import open_warehouse, warehouse_key

_held_runs: dict[tuple[str, str], tuple[int, Path]] = {}  # (file, run) -> (fd, lock file)
ABANDONED = "abandoned"


def _runs_dir(db_path: Path | str) -> Path:
    return get_settings().work_dir / "runs" / warehouse_key(db_path)


def hold_run(db_path: Path | str, run_id: str) -> None:
    """Take this process's lock on the run (kept until ``run_end_to`` or the process ends).
    Best effort: a home that cannot take the file costs only the later detection."""
    key = (str(Path(db_path).resolve()), run_id)
    if key in _held_runs:
        return
    folder = _runs_dir(db_path) / hashlib.sha256(run_id.encode()).hexdigest()[:16]
    lock = folder / f"{os.getpid()}-{os.urandom(4).hex()}.lock"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # blocking: a probe holds it for an instant at most
        owner = {"run_id": run_id, "pid": os.getpid(), "host": socket.gethostname()}
        os.write(fd, json.dumps(owner).encode())
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            lock.unlink()
        return
    _held_runs[key] = (fd, lock)


def release_run(db_path: Path | str, run_id: str) -> None:
    entry = _held_runs.pop((str(Path(db_path).resolve()), run_id), None)
    if entry is None:
        return
    fd, lock = entry
    with contextlib.suppress(OSError):
        lock.unlink()  # before the lock goes: no one may find it untaken and judge the run dead
    os.close(fd)
    with contextlib.suppress(OSError):
        lock.parent.rmdir()


def _writer_gone(lock: Path) -> dict[str, Any] | None:
    """The owner a lock file names, when no process holds it any more; else ``None``."""
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return None  # held: its writer is alive
        try:
            owner = json.loads(os.pread(fd, 4096, 0) or b"null")
        except ValueError:
            return None
        return owner if isinstance(owner, dict) and isinstance(owner.get("run_id"), str) else None
    finally:
        os.close(fd)  # drops the probe's own lock


def _dead_runs(db_path: Path | str) -> dict[str, list[tuple[Path, dict[str, Any]]]]:
    """Runs of this warehouse with lock files and no live writer: run id -> its locks."""
    root = _runs_dir(db_path)
    if not root.is_dir():
        return {}
    held = {lock for fd, lock in _held_runs.values()}
    dead: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for folder in root.iterdir():
        locks = sorted(folder.glob("*.lock")) if folder.is_dir() else []
        owners = [(lock, _writer_gone(lock)) for lock in locks if lock not in held]
        if not locks or len(owners) < len(locks) or any(o is None for _, o in owners):
            continue  # a writer of this run is alive (or its lock file says nothing)
        for lock, owner in owners:
            if owner is not None:
                dead.setdefault(str(owner["run_id"]), []).append((lock, owner))
    return dead


def mark_abandoned(con: duckdb.DuckDBPyConnection, db_path: Path | str) -> list[str]:
    """Mark the runs whose writer died while they were ``running`` as incomplete, reason
    ``abandoned: …``; returns their ids. Cheap when there is nothing to mark (no files)."""
    dead = _dead_runs(db_path)
    marked: list[str] = []
    for run_id, locks in dead.items():
        row = con.execute(
            "select status, config_json from raw.runs where run_id = ?", [run_id]
        ).fetchone()
        if row is not None and row[0] == "running":
            who = ", ".join(f"pid {o.get('pid')} on {o.get('host')}" for _, o in locks)
            reason = f"{ABANDONED}: the process writing it ({who}) ended without finishing it"
            with contextlib.suppress(ValueError, TypeError):
                if json.loads(row[1] or "{}").get("distributed"):
                    reason += (
                        f"; its children's waves in the lake can still be staged with "
                        f"`sparkcap run --finish {run_id}`"
                    )
            con.execute(
                "update raw.runs set status = 'incomplete', status_reason = ? "
                "where run_id = ? and status = 'running'",
                [reason, run_id],
            )
            marked.append(run_id)
        for lock, _ in locks:
            with contextlib.suppress(OSError):
                lock.unlink()
            with contextlib.suppress(OSError):
                lock.parent.rmdir()
    return marked


def mark_abandoned_to(db_path: Path | str) -> list[str]:
    """``mark_abandoned`` in a connection of its own, opened only when a lock file says a
    writer died: a warehouse nothing was left running in is not opened at all."""
    if not Path(db_path).is_file() or not _dead_runs(db_path):
        return []
    with open_warehouse(db_path) as con:
        return mark_abandoned(con, db_path)
