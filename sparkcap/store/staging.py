"""Staging into the ``raw`` schema: waves, and a run's rows of a results table.

- one transaction per wave (delete-then-insert by ``wave_id``), so a crash loses at most the
  wave in flight and re-staging never duplicates rows;
- bulk inserts from Arrow, never row by row.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow as pa

from sparkcap.loadgen.records import WaveRecord
from sparkcap.store.arrow_tables import metrics_table, wave_tables
from sparkcap.store.connection import (
    ensure_schema,
    insert_arrow,
    open_warehouse,
    rollback_if_open,
)


def stage_tables(
    con: duckdb.DuckDBPyConnection,
    wave_ids: Sequence[str],
    tables: dict[str, pa.Table],
    server_metrics: pa.Table | None = None,
) -> None:
    """Replace the given waves' rows in one transaction (idempotent re-staging)."""
    ids = list(wave_ids)
    con.execute("begin transaction")
    try:
        # only a re-staged wave pays for the deletes (raw.waves is small; raw.chunks is not)
        (existing,) = con.execute(
            "select count(*) from raw.waves where list_contains(?, wave_id)", [ids]
        ).fetchall()[0]
        if existing:
            con.execute(
                "delete from raw.chunks where request_id in (select request_id from "
                "raw.requests where list_contains(?, wave_id))",
                [ids],
            )
            for name in (
                "requests",
                "server_metrics",
                "client_processes",
                "search_levels",
                "power_samples",
                "replay_offers",
                "waves",
            ):
                con.execute(f"delete from raw.{name} where list_contains(?, wave_id)", [ids])
        for name in (
            "waves",
            "requests",
            "chunks",
            "client_processes",
            "search_levels",
            "power_samples",
            "replay_offers",
        ):
            # older spools lack client_processes (< 0.3), search_levels, power_samples,
            # replay_offers
            if name in tables:
                insert_arrow(con, f"raw.{name}", tables[name])
        if server_metrics is not None and server_metrics.num_rows:
            insert_arrow(con, "raw.server_metrics", server_metrics)
        con.execute("commit")
    except BaseException:
        rollback_if_open(con)
        raise


def replace_run_rows(db_path: Path | str, table_name: str, run_id: str, rows: pa.Table) -> None:
    """Replace one run's rows of a results table in one transaction (re-running replaces)."""
    with open_warehouse(db_path) as con:
        ensure_schema(con)
        con.execute("begin transaction")
        try:
            con.execute(f"delete from {table_name} where run_id = ?", [run_id])
            insert_arrow(con, table_name, rows)
            con.execute("commit")
        except BaseException:
            rollback_if_open(con)
            raise


def stage_wave(con: duckdb.DuckDBPyConnection, wave: WaveRecord) -> None:
    """Stage one wave, and its server metrics, in one transaction on an open connection."""
    stage_tables(con, [wave.wave_id], wave_tables(wave), metrics_table(wave))


def stage_wave_to(db_path: Path | str, wave: WaveRecord) -> None:
    """Open, stage one wave in one transaction, close: other processes can read in between."""
    with open_warehouse(db_path) as con:
        stage_wave(con, wave)
