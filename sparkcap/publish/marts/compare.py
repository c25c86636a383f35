"""What ``sparkcap compare RUN_A RUN_B`` reads from the marts: the two runs side by side, and
the regression gate's inputs.

The side-by-side tables are frames (the comparison prints them whole, in every format). The
gate's judgement is dbt's: the pairs where the later run regressed come from the macro
``regression_gate`` (the rule ``fct_capacity_regressions`` runs on each night against the one
before it), compiled once and run here on any two runs, so compare never writes the rule again.
"""

from __future__ import annotations

from typing import NamedTuple

import duckdb
import pandas as pd

from sparkcap.publish.marts import has_mart
from sparkcap.transform.dbt_compile import compile_inline

# the gate over two named relations, bound below to the two runs' capacities and their pair
_GATE_INLINE = "{{ regression_gate('gate_capacities', 'gate_run_pairs') }}"

LEVELS_SQL = """
select coalesce(a.deployment, b.deployment) as deployment,
       coalesce(a.workload, b.workload) as workload,
       coalesce(a.concurrency, b.concurrency) as concurrency,
       a.median_decode_tok_s as a_median_tok_s, b.median_decode_tok_s as b_median_tok_s,
       (b.median_decode_tok_s / nullif(a.median_decode_tok_s, 0) - 1) * 100 as median_change_pct,
       a.aggregate_tok_s as a_aggregate_tok_s, b.aggregate_tok_s as b_aggregate_tok_s,
       (b.aggregate_tok_s / nullif(a.aggregate_tok_s, 0) - 1) * 100 as aggregate_change_pct
from (select * from marts.fct_levels where run_id = $a) as a
full join (select * from marts.fct_levels where run_id = $b) as b
    using (deployment, workload, concurrency)
order by 1, 2, 3
"""

CAPACITY_SQL = """
select coalesce(a.deployment, b.deployment) as deployment,
       coalesce(a.workload, b.workload) as workload,
       a.capacity_streams as a_capacity, b.capacity_streams as b_capacity,
       -- a run that measured nothing has no capacity to compare (its 0 is no measurement)
       case when a.is_measured and b.is_measured
            then b.capacity_streams - a.capacity_streams end as capacity_change,
       a.capacity_verdict as a_verdict, b.capacity_verdict as b_verdict
from (select * from marts.fct_capacity where run_id = $a) as a
full join (select * from marts.fct_capacity where run_id = $b) as b using (deployment, workload)
order by 1, 2
"""

PREFILL_SQL = """
with p as (select run_id, deployment, median(prefill_tok_s) as prefill_tok_s
           from marts.fct_prefill_interference where run_id in ($a, $b) group by all),
l as (select run_id, deployment, min(achieved_gbps) as worst_link_gbps,
             bool_and(healthy) as links_healthy
      from marts.fct_link_health where run_id in ($a, $b) group by all),
d as (select distinct deployment from p union select distinct deployment from l)
select d.deployment,
       pa.prefill_tok_s as a_prefill_tok_s, pb.prefill_tok_s as b_prefill_tok_s,
       (pb.prefill_tok_s / nullif(pa.prefill_tok_s, 0) - 1) * 100 as prefill_change_pct,
       la.worst_link_gbps as a_worst_link_gbps, lb.worst_link_gbps as b_worst_link_gbps,
       la.links_healthy as a_links_healthy, lb.links_healthy as b_links_healthy
from d
left join p pa on pa.deployment = d.deployment and pa.run_id = $a
left join p pb on pb.deployment = d.deployment and pb.run_id = $b
left join l la on la.deployment = d.deployment and la.run_id = $a
left join l lb on lb.deployment = d.deployment and lb.run_id = $b
order by 1
"""

# the comparison's tables by name, in the order they are printed
SIDE_BY_SIDE_SQL = {"levels": LEVELS_SQL, "capacity": CAPACITY_SQL, "prefill_links": PREFILL_SQL}

BUILT_SQL = """
select run_id, count(*) as n_rows, count(*) filter (where is_measured) as n_measured
from marts.fct_capacity where run_id in ($a, $b) group by run_id
"""

FLEETS_SQL = """
select distinct run_id, fleet_name from marts.dim_deployments where run_id in ($a, $b)
"""

FLAGGED_SLOWER_SQL = """
select deployment, workload, subject, concurrency, change_pct, p_value, what_else_changed,
       verdict
from marts.fct_changes
where run_id = $b and is_change and direction in ('slower', 'lower')
order by deployment, workload, subject, concurrency
"""


class GatePair(NamedTuple):
    """A deployment × workload the earlier run measured and the later regressed on, by the
    macro ``regression_gate`` (the columns of ``fct_capacity_regressions``): each capacity with
    the low and high end of its interval (no high end: a lower bound)."""

    deployment: str
    workload: str
    earlier_capacity_streams: int
    earlier_low_streams: int
    earlier_high_streams: int | None
    later_capacity_streams: int | None
    later_low_streams: int | None
    later_high_streams: int | None
    later_is_measured: bool | None
    gate_verdict: str  # 'below', 'not measured' or 'missing' (no row in the later run)


class BuiltCapacities(NamedTuple):
    """A run's rows in ``fct_capacity``: none means it was never built."""

    n_rows: int
    n_measured: int


class FlaggedChange(NamedTuple):
    """``fct_changes``: a change flagged slower or lower than the run's baseline."""

    deployment: str
    workload: str
    subject: str
    concurrency: int | None
    change_pct: float | None
    p_value: float | None
    what_else_changed: str | None
    verdict: str | None


def side_by_side(con: duckdb.DuckDBPyConnection, run_a: str, run_b: str) -> dict[str, pd.DataFrame]:
    """The two runs' levels, capacities, and prefill and links, each a frame by its name."""
    params = {"a": run_a, "b": run_b}
    return {
        name: con.sql(sql, params=params).to_arrow_table().to_pandas()
        for name, sql in SIDE_BY_SIDE_SQL.items()
    }


def built_capacities(
    con: duckdb.DuckDBPyConnection, run_a: str, run_b: str
) -> dict[str, BuiltCapacities]:
    """Each of the two runs with built capacities, by run id (``fct_capacity`` must exist)."""
    rows = con.execute(BUILT_SQL, {"a": run_a, "b": run_b}).fetchall()
    return {str(run): BuiltCapacities(int(n), int(m)) for run, n, m in rows}


def fleet_names(con: duckdb.DuckDBPyConnection, run_a: str, run_b: str) -> dict[str, str | None]:
    """The fleet each of the two runs measured, by run id (``None``: an ad-hoc sweep); a run
    without deployments in ``dim_deployments`` is left out."""
    if not has_mart(con, "dim_deployments"):
        return {}
    rows = con.execute(FLEETS_SQL, {"a": run_a, "b": run_b}).fetchall()
    return {str(run): None if fleet is None else str(fleet) for run, fleet in rows}


def regressed_pairs(
    con: duckdb.DuckDBPyConnection, earlier_run: str, later_run: str
) -> list[GatePair]:
    """The pairs where ``later_run`` regressed against ``earlier_run`` by dbt's macro
    ``regression_gate``, compiled (``fct_capacity`` must exist)."""
    gate_sql = compile_inline(_GATE_INLINE)
    sql = f"""
with gate_capacities as (
    select * from marts.fct_capacity where run_id in ($earlier, $later)
),
gate_run_pairs as (
    select $earlier::varchar as earlier_run_id, $later::varchar as later_run_id
)
select {", ".join(GatePair._fields)}
from ({gate_sql}) as gate
where is_regression
order by deployment, workload
"""
    rows = con.execute(sql, {"earlier": earlier_run, "later": later_run}).fetchall()
    return [GatePair(*r) for r in rows]


def flagged_slower(con: duckdb.DuckDBPyConnection, run_id: str) -> list[FlaggedChange]:
    """The run's changes ``fct_changes`` flagged slower or lower (none until it is built)."""
    if not has_mart(con, "fct_changes"):
        return []
    return [FlaggedChange(*r) for r in con.execute(FLAGGED_SLOWER_SQL, {"b": run_id}).fetchall()]
