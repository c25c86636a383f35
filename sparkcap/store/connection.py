"""Connections to the DuckDB warehouse: opening it, its locks, its storage faults.

DuckDB admits one writing process: connections are opened per unit of work and closed, and a
held lock becomes :class:`~sparkcap.errors.WarehouseBusy` after a bounded wait instead of a
stack trace; a file or disk that fails is one :class:`~sparkcap.errors.StorageError` naming the
file and the operating system's cause. Opened for writing, a warehouse has the raw schema
(``ensure_schema``), whose tables and columns keep their names for ad-hoc SQL users (columns may
be added, never renamed).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa

from sparkcap.errors import MissingFile, StaleWarehouse, StorageError, WarehouseBusy
from sparkcap.settings import get_settings
from sparkcap.store.schema import RAW_TABLES, SCHEMA_SQL, columns

# the name the warehouse file is attached under in every connection: DuckDB would otherwise
# name its catalog after the file's stem, and a file called raw.duckdb or marts.duckdb makes
# ``raw.runs`` ambiguous (dbt's profile attaches it under the same name)
CATALOG = "warehouse"

# OS causes DuckDB reports in words, named by errno so a full disk reads as ENOSPC
_OS_CAUSES = {
    os.strerror(code): name
    for name in ("ENOSPC", "EDQUOT", "EROFS", "EACCES", "EPERM", "EIO", "ENOTDIR", "EISDIR")
    if (code := getattr(errno, name, None)) is not None
}


def warehouse_key(db_path: Path | str) -> str:
    """A folder name for one DuckDB file: readable stem plus a digest of its absolute path."""
    path = Path(db_path).resolve()
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", path.stem)[:40]
    return f"{stem}-{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"


def _is_lock_error(exc: Exception) -> bool:
    msg = str(exc).lower()
    return "lock" in msg and ("conflicting" in msg or "could not set" in msg)


def _cause(exc: BaseException) -> str | None:
    """The storage fault behind an exception, as one line; ``None`` when it is not one."""
    if isinstance(exc, OSError):
        name = errno.errorcode.get(exc.errno or 0)
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror or exc}{where}" + (f" ({name})" if name else "")
    if not isinstance(exc, duckdb.Error):
        return None
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    named = [name for words, name in _OS_CAUSES.items() if words in text]
    io_fault = isinstance(exc, duckdb.IOException | duckdb.FatalException) or bool(named)
    if not io_fault or _is_lock_error(exc):
        return None
    for prefix in ("IO Error: ", "FATAL Error: ", "TransactionContext Error: "):
        text = text.removeprefix(prefix)
    return text[:300] + (f" ({named[0]})" if named else "")


def storage_error(path: Path | str, doing: str, exc: BaseException) -> StorageError | None:
    """``exc`` as a :class:`StorageError` naming ``path``, when it is a storage fault."""
    cause = _cause(exc)
    return None if cause is None else StorageError(f"{path}: cannot {doing}: {cause}")


def _attach(path: Path, read_only: bool, busy_wait_s: float) -> duckdb.DuckDBPyConnection:
    # One named in-memory instance per file and mode: DuckDB shares it between this process's
    # connections (as it shares a file's own instance), so the file is attached once and
    # released, for other processes, when the last connection closes.
    resolved = path.resolve()
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:16]
    mode = "ro" if read_only else "rw"
    deadline = time.monotonic() + busy_wait_s
    delay = 0.05
    while True:
        con = duckdb.connect(
            f":memory:sparkcap-{mode}-{digest}",
            # spills beside the file, as for a file opened directly (not in the cwd's .tmp)
            config={"temp_directory": f"{resolved}.tmp"},
        )
        try:
            literal = str(resolved).replace("'", "''")
            con.execute(
                f"attach if not exists '{literal}' as {CATALOG}"
                + (" (read_only)" if read_only else "")
            )
            con.execute(f"use {CATALOG}")
            return con
        except duckdb.Error as exc:
            con.close()
            if not _is_lock_error(exc):
                raise
            if time.monotonic() >= deadline:
                raise WarehouseBusy(
                    f"database is busy: {path} is held by another process "
                    f"(waited {busy_wait_s:.0f} s)"
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


def connect(
    db_path: Path | str, *, read_only: bool = False, busy_wait_s: float | None = None
) -> duckdb.DuckDBPyConnection:
    """Open the warehouse, waiting a bounded time for another writer to let go. Any file
    name works (it is attached under :data:`CATALOG`); a file that cannot be opened is a
    :class:`StorageError` naming it and why."""
    if busy_wait_s is None:
        busy_wait_s = get_settings().busy_wait_s
    path = Path(db_path)
    if read_only and not path.exists():
        raise MissingFile(f"no warehouse at {path} (run a sweep first)")
    try:
        if not read_only:
            path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            raise StorageError(f"{path}: cannot open: is a folder, not a DuckDB file")
        return _attach(path, read_only, busy_wait_s)
    except (OSError, duckdb.Error) as exc:
        err = storage_error(path, "open", exc)
        if err is None:
            raise
        raise err from None


def has_table(con: duckdb.DuckDBPyConnection, schema: str, name: str) -> bool:
    """Whether ``schema.name`` is in this warehouse (a table or a view dbt built)."""
    # fetchall: a result left unfetched blocks the connection's next statement
    rows = con.execute(
        "select count(*) from information_schema.tables "
        "where table_schema = ? and table_name = ? and table_catalog = current_database()",
        [schema, name],
    ).fetchall()
    return bool(rows and rows[0][0])


@contextlib.contextmanager
def open_warehouse(
    db_path: Path | str, *, read_only: bool = False, busy_wait_s: float | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection for one unit of work. A storage fault met inside it (a full disk at
    commit, a corrupt block) leaves as one :class:`StorageError` naming the file."""
    con = connect(db_path, read_only=read_only, busy_wait_s=busy_wait_s)
    failed = True
    try:
        if not read_only:
            ensure_schema(con)
        yield con
        failed = False
    except duckdb.BinderException as exc:
        if not read_only:  # a writer's query that does not bind is sparkcap's own defect
            raise
        cause = str(exc).split("\n", 1)[0].removeprefix("Binder Error: ").strip()
        raise StaleWarehouse(
            f"{db_path}: built by another sparkcap ({cause}); run "
            f"`sparkcap build --db {db_path}` to build its marts with this one"
        ) from None
    except duckdb.Error as exc:
        err = storage_error(db_path, "use", exc)
        if err is None:
            raise
        raise err from None
    finally:
        try:
            con.close()
        except duckdb.Error as exc:
            if not failed:  # else the fault that got us here is the one to tell
                err = storage_error(db_path, "close", exc)
                if err is None:
                    raise
                raise err from None


@functools.cache
def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create the raw schema, and add any column a newer sparkcap expects to an older file.

    Columns are only ever added (the contract), so upgrading a warehouse is additive: old
    rows get NULL in the new columns and every query written against the old layout still runs.
    """
    con.execute(SCHEMA_SQL)
    have = {
        (t, c)
        for t, c in con.execute(
            "select table_name, column_name from information_schema.columns "
            "where table_schema = 'raw' and table_catalog = current_database()"
        ).fetchall()
    }
    for table in RAW_TABLES:
        for column, dtype in columns(table):
            if (table, column) not in have:
                con.execute(f'alter table raw.{table} add column "{column}" {dtype}')
    # 0.2 stopped judging saturation at capture time: the legacy column must admit NULL
    (legacy_not_null,) = con.execute(
        "select count(*) from information_schema.columns where table_schema = 'raw' "
        "and table_catalog = current_database() and table_name = 'waves' "
        "and column_name = 'client_saturated' and is_nullable = 'NO'"
    ).fetchone() or (0,)
    if legacy_not_null:
        con.execute("alter table raw.waves alter column client_saturated drop not null")


def rollback_if_open(con: duckdb.DuckDBPyConnection) -> None:
    """Undo the open transaction, if DuckDB still has one: a commit that failed (a full disk
    writing the WAL) has already ended it, and the rollback's own error ("no transaction is
    active") must not replace the fault that ended it."""
    with contextlib.suppress(duckdb.Error):
        con.execute("rollback")


def insert_arrow(con: duckdb.DuckDBPyConnection, target: str, table: pa.Table) -> None:
    """Bulk insert an Arrow table by column name (columns it lacks stay NULL), never row by
    row."""
    cols = ", ".join(f'"{c}"' for c in table.column_names)
    stage_arrow = table  # noqa: F841 - found by DuckDB's replacement scan below
    con.execute(f"insert into {target} ({cols}) select {cols} from stage_arrow")
