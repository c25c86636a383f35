"""``sparkcap run --finish RUN_ID``: a distributed night whose parent stopped (killed, its host
rebooted) after starting the children, completed later from the lake alone. The children's
own statuses and heartbeats say how each ended (``rules.finish_verdict``); no Prefect server is
needed. What follows is what the parent would have done after its wait (``parent.land``)."""

from __future__ import annotations

import json
from datetime import UTC
from pathlib import Path

from sparkcap.config.fleet import Fleet
from sparkcap.errors import DistributedError
from sparkcap.night.distributed.child import ChildSpec
from sparkcap.night.distributed.parent import lake_url, land
from sparkcap.night.distributed.rules import (
    Finish,
    finish_verdict,
    lost_reason,
    never_started_reason,
)
from sparkcap.night.distributed.watch import ChildRun, FanOut
from sparkcap.night.plan import Night
from sparkcap.night.sweeps import RunResult
from sparkcap.store.connection import open_warehouse
from sparkcap.store.lake import Lake


def finish_distributed(night: Night) -> RunResult:
    """The sweep step of a night whose parent stopped: no fan-out and no waiting, only what
    the lake holds."""
    run_id = night.require_run_id()
    fan = children_to_finish(night.fleet, night.db_path, run_id)
    lake = Lake(fan.children[0].spec.lake) if fan.children else Lake(lake_url(night.fleet))
    return land(night, lake, fan, RunResult(run_id, night.db_path))


def children_to_finish(fleet: Fleet, db_path: Path, run_id: str) -> FanOut:
    """How each child of a stopped parent's night ended, from its own status in the lake; read
    only, so the CLI refuses a finish before anything starts. One still running (a fresh
    heartbeat) refuses it, since staging now would keep half its sweep; one whose heartbeat
    went silent is lost and one with no status never started: both named, as the parent
    would have named them."""
    if not Path(db_path).exists():
        raise DistributedError(f"no database at {db_path}: finish a night against its parent's")
    with open_warehouse(db_path, read_only=True) as con:
        row = con.execute(
            "select config_json, started_at from raw.runs where run_id = ?", [run_id]
        ).fetchone()
    if row is None:
        raise DistributedError(
            f"run {run_id} is not in {db_path}: finish a night against the database its "
            "parent started it in (it records the run before starting any child)"
        )
    recorded = (json.loads(row[0]) if row[0] else {}).get("distributed") or {}
    if not recorded:
        raise DistributedError(f"run {run_id} was not a distributed night: nothing to finish")
    url = str(recorded.get("lake") or lake_url(fleet))
    day = str(recorded.get("night") or row[1].astimezone(UTC).date().isoformat())
    lake = Lake(url)
    fan = FanOut()
    for dep, workload in fleet.planned_waves():
        spec = ChildSpec(
            fleet_path="",
            profile="full",
            deployment=dep,
            workload=workload,
            run_id=run_id,
            night=day,
            lake=url,
        )
        child = ChildRun(spec, flow_run_id=None, state="UNKNOWN")
        status = lake.read_status(spec.key)
        age = lake.heartbeat_age_s(spec.key)
        state = None if status is None else str(status.get("state"))
        verdict = finish_verdict(state, age, fleet.distributed.stall_s)
        host = (status or {}).get("host", "?")
        if verdict is Finish.NEVER_STARTED:
            child.reason = never_started_reason(workload, url)
        elif verdict is Finish.STILL_RUNNING:
            raise DistributedError(
                f"{dep}/{workload} of run {run_id} is still running on {host} (heartbeat "
                f"{age:.0f} s ago): finish the night once it has ended"
            )
        elif verdict is Finish.LOST:
            silent = f"{age:.0f} s" if age is not None else "ever"
            child.reason = lost_reason(workload, silent, host)
        fan.children.append(child)
    return fan
