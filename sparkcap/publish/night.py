"""One built night, read once from the marts, and handed to every renderer.

The terminal, the Prometheus textfile, the Prefect artifacts and the HTML report each render a
:class:`NightReport`; none of them opens the warehouse itself. So every renderer shows the same
rows of the same build, and a figure a person reads in one place is the figure in the others.
The typed rows come from :mod:`sparkcap.publish.marts`; their words from
:mod:`sparkcap.publish.text`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the readers import DuckDB (+0.24 s): read when a night is read
    from sparkcap.publish.marts import (
        BottleneckRow,
        CapacityRow,
        ChangeRow,
        ContextLadderRow,
        EnergyAtCapacityRow,
        FleetRow,
        LevelRow,
        PlanRatesRow,
        PlanRoutingRow,
        PlanRow,
        RunRow,
        SessionCacheRow,
        TierRow,
    )


@dataclass(frozen=True)
class NightReport:
    """One run as its marts hold it. A mart the warehouse lacks (built by an older sparkcap, or
    a build that stopped part-way) reads as no rows, never as a failure of the night.

    ``frames`` holds the wide tables only the HTML page charts (read when asked for: the
    terminal and the textfile do without pandas)."""

    run: RunRow
    capacities: Sequence[CapacityRow]
    fleet: Sequence[FleetRow] = ()
    tiers: Sequence[TierRow] = ()
    changes: Sequence[ChangeRow] = ()
    energy: Sequence[EnergyAtCapacityRow] = ()
    levels: Sequence[LevelRow] = ()
    bottlenecks: Sequence[BottleneckRow] = ()
    session_caches: Sequence[SessionCacheRow] = ()
    context_ladders: Sequence[ContextLadderRow] = ()
    plan: PlanRow | None = None
    plan_routing: Sequence[PlanRoutingRow] = ()
    plan_rates: Sequence[PlanRatesRow] = ()
    frames: dict[str, Any] | None = None

    @property
    def run_id(self) -> str:
        return self.run.run_id


def read_night(db_path: Path, run_id: str | None = None, *, frames: bool = False) -> NightReport:
    """The run's rows from the marts (default: the newest built run); ``frames``: the HTML
    page's tables too."""
    from sparkcap.publish import marts

    run_id = run_id or marts.latest_built_run(db_path)
    run = marts.run_row(db_path, run_id)
    wide: dict[str, Any] | None = None
    if frames:
        from sparkcap.publish.marts.frames import load_data  # +0.5 s (pandas)

        wide = load_data(db_path, run_id)
    return NightReport(
        run=run,
        capacities=marts.capacities(db_path, run_id),
        fleet=marts.fleet_capacities(db_path, run_id),
        tiers=marts.capacity_tiers(db_path, run_id),
        changes=marts.changes(db_path, run_id),
        energy=marts.energy_at_capacity(db_path, run_id),
        levels=marts.levels(db_path, run_id),
        bottlenecks=marts.bottlenecks(db_path, run_id),
        session_caches=marts.session_caches(db_path, run_id),
        context_ladders=marts.context_ladders(db_path, run_id),
        plan=marts.plan(db_path, run_id),
        plan_routing=marts.plan_routing(db_path, run_id),
        plan_rates=marts.plan_rates(db_path, run_id),
        frames=wide,
    )
