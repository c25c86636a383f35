"""A run's rows: its start (config, deployments, declared facts), its steps' outcomes, the
facts discovery found, the hosts that measured it, and its end.

Each ``…_to`` function opens the warehouse for its own unit of work and closes it, so other
processes can read in between.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from sparkcap import __version__
from sparkcap.config.deployment import Deployment
from sparkcap.loadgen.discover import DECLARED, SPARKCAP, FactRow, declared_facts, sparkcap_facts
from sparkcap.settings import get_settings
from sparkcap.store.abandoned import ABANDONED, hold_run, mark_abandoned, release_run
from sparkcap.store.arrow_tables import facts_table, utc_from_ns
from sparkcap.store.connection import CATALOG, insert_arrow, open_warehouse, rollback_if_open


def record_run_start(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    config: dict[str, Any],
    started_at_ns: int,
    deployments: Sequence[Deployment] = (),
) -> None:
    """Record the run's start on an open connection: its row (or, for a sweep joining an
    open run, its sweeps added to the recorded config), its deployments and their declared
    facts, in one transaction."""
    con.execute("begin transaction")
    row = con.execute("select config_json from raw.runs where run_id = ?", [run_id]).fetchone()
    if row is None:
        con.execute(
            "insert into raw.runs (run_id, started_at, sparkcap_version, config_json, status) "
            "values (?, ?, ?, ?, 'running')",
            [run_id, utc_from_ns(started_at_ns), __version__, json.dumps(config, sort_keys=True)],
        )
    else:  # a sweep added to an open run: its sweeps join the run's recorded config
        before = json.loads(row[0] or "{}")
        if isinstance(before.get("sweeps"), list) and isinstance(config.get("sweeps"), list):
            config = {**before, "sweeps": before["sweeps"] + config["sweeps"]}
            con.execute(
                "update raw.runs set config_json = ? where run_id = ?",
                [json.dumps(config, sort_keys=True), run_id],
            )
    # only the deployments recorded now are replaced: a sweep added to an open run
    # (`sparkcap sweep --run`) keeps the rows of the deployments swept before it
    con.execute(
        "delete from raw.deployments where run_id = ? and list_contains(?, deployment)",
        [run_id, [d.name for d in deployments]],
    )
    for d in deployments:
        con.execute(
            "insert into raw.deployments (run_id, deployment, model, endpoint, nodes, hardware, "
            "replicas, parallel_slots, reports_usage, extra_body_json, timeout_total_s, "
            "reasoning) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                run_id,
                d.name,
                d.model,
                str(d.endpoint),
                d.nodes,
                d.hardware or None,
                d.replicas,
                d.parallel_slots,
                d.reports_usage,
                json.dumps(d.extra_body, sort_keys=True),
                d.timeouts.total_s,
                d.reasoning,
            ],
        )
    _record_declared_facts(con, run_id, deployments)
    con.execute("commit")


def _record_declared_facts(
    con: duckdb.DuckDBPyConnection, run_id: str, deployments: Sequence[Deployment]
) -> None:
    """The declared facts of the deployments recorded now, and what sparkcap knows of them
    (their settings' hash, this client host), replacing what was recorded before (a sweep
    joining its run again); what discovery found is replaced by discovery."""
    con.execute(
        "delete from raw.deployment_facts where run_id = ? and source in (?, ?) "
        "and list_contains(?, deployment)",
        [run_id, DECLARED, SPARKCAP, [d.name for d in deployments]],
    )
    host = get_settings().client_host
    for d in deployments:
        rows = declared_facts(d) + sparkcap_facts(d, host)
        insert_arrow(con, "raw.deployment_facts", facts_table(run_id, d.name, rows))


def record_discovered_facts_to(
    db_path: Path | str, run_id: str, deployment: str, rows: Sequence[FactRow]
) -> None:
    """Replace what discovery found for one deployment of a run, in one transaction; the
    declared rows and sparkcap's own stay."""
    with open_warehouse(db_path) as con:
        con.execute("begin transaction")
        try:
            con.execute(
                "delete from raw.deployment_facts where run_id = ? and deployment = ? "
                "and source not in (?, ?)",
                [run_id, deployment, DECLARED, SPARKCAP],
            )
            if rows:
                insert_arrow(con, "raw.deployment_facts", facts_table(run_id, deployment, rows))
            con.execute("commit")
        except BaseException:
            rollback_if_open(con)
            raise


def record_client_hosts_to(db_path: Path | str, run_id: str, hosts: dict[str, str]) -> None:
    """Replace each named deployment's ``client_host`` with the hosts that measured it: in a
    distributed night the workers, not the parent that recorded the run (``hosts``: deployment
    -> their names, joined)."""
    with open_warehouse(db_path) as con:
        con.execute("begin transaction")
        try:
            for deployment, host in hosts.items():
                con.execute(
                    "delete from raw.deployment_facts where run_id = ? and deployment = ? "
                    "and fact = 'client_host' and source = ?",
                    [run_id, deployment, SPARKCAP],
                )
                row = FactRow(
                    "client_host",
                    None,
                    SPARKCAP,
                    "the hosts the night's children ran on",
                    text_value=host[:256],
                )
                insert_arrow(con, "raw.deployment_facts", facts_table(run_id, deployment, [row]))
            con.execute("commit")
        except BaseException:
            rollback_if_open(con)
            raise


def record_run_end(
    con: duckdb.DuckDBPyConnection, run_id: str, status: str, reason: str | None = None
) -> None:
    """Record the run's end on an open connection, and checkpoint the file."""
    # a distributed night marked abandoned when its parent died is finished from its lake
    # (`sparkcap run --finish`): that account of the night replaces the provisional one
    con.execute(
        "update raw.runs set status = 'running', status_reason = null where run_id = ? "
        "and status = 'incomplete' and starts_with(status_reason, ?) "
        "and json_exists(config_json, '$.distributed')",
        [run_id, f"{ABANDONED}: "],
    )
    # a run that several sweeps add to stays incomplete once any of them was, with every reason
    con.execute(
        "update raw.runs set finished_at = ?, "
        "status = case when status = 'incomplete' then 'incomplete' else ? end, "
        "status_reason = case when status = 'incomplete' and status_reason is not null "
        "then status_reason || coalesce('; ' || ?, '') else ? end where run_id = ?",
        [datetime.now(UTC), status, reason, reason, run_id],
    )
    con.execute(f"checkpoint {CATALOG}")


def run_start_to(
    db_path: Path | str,
    run_id: str,
    config: dict[str, Any],
    started_ns: int,
    deployments: Sequence[Deployment] = (),
) -> None:
    """Record the run's start (or a sweep joining it) and mark this process as its writer."""
    with open_warehouse(db_path) as con:
        mark_abandoned(con, db_path)
        hold_run(db_path, run_id)
        record_run_start(con, run_id, config, started_ns, deployments)


def record_step_to(
    db_path: Path | str,
    run_id: str,
    deployment: str | None,
    step: str,
    status: str,
    reason: str | None = None,
) -> None:
    """Record (or replace) what one step did for one deployment of a run."""
    with open_warehouse(db_path) as con:
        con.execute("begin transaction")
        con.execute(
            "delete from raw.step_outcomes where run_id = ? and deployment is not distinct from ? "
            "and step = ?",
            [run_id, deployment, step],
        )
        con.execute(
            "insert into raw.step_outcomes values (?, ?, ?, ?, ?, ?)",
            [
                run_id,
                deployment,
                step,
                status,
                (reason or None) and reason[:1000],
                datetime.now(UTC),
            ],
        )
        con.execute("commit")


def run_end_to(db_path: Path | str, run_id: str, status: str, reason: str | None = None) -> None:
    """Record the run's end and let go of this process's lock on it."""
    with open_warehouse(db_path) as con:
        record_run_end(con, run_id, status, reason)
    release_run(db_path, run_id)
