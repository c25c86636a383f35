"""Reading a test's warehouse, and copying a shared one to change."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb


def q(db: Path, sql: str, params: list[object] | None = None) -> list[tuple[object, ...]]:
    """The rows of ``sql`` (with ``params``) on the warehouse at ``db``, opened read-only: a
    test's reads never take the write lock a command under test may need."""
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


def wave_census(db: Path) -> tuple[int, int]:
    """(waves stored, waves whose requests or chunks are not all there)."""
    with duckdb.connect(str(db)) as con:
        row = con.execute("""
            with r as (select wave_id, count(*) n, sum(n_chunks) chunks from raw.requests
                       group by 1),
                 c as (select q.wave_id, count(*) n from raw.chunks ch
                       join raw.requests q using (request_id) group by 1)
            select count(*), count(*) filter (where r.n is distinct from w.n_requests
                                              or c.n is distinct from r.chunks)
            from raw.waves w left join r using (wave_id) left join c using (wave_id)
        """).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def copy_of(db: Path, folder: Path, name: str = "copy.duckdb") -> Path:
    """A copy of the warehouse at ``db`` in ``folder``, for a test that changes what a shared
    night (a session's fixture) holds: its other readers see it as built."""
    copy = folder / name
    shutil.copy(db, copy)
    return copy
