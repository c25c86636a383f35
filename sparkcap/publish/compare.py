"""``sparkcap compare RUN_A RUN_B``: the study's before/after question in one command.

Per deployment × workload × level: the change in median decode rate and aggregate
throughput; per deployment × workload: the change in capacity, beside each run's verdict (a
run that measured nothing has no change to show); per deployment: the change in
prefill throughput (from the prefill-interference probe) with link health beside it. Read
from the marts, so both runs must have been built.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sparkcap.publish.marts import require_runs
from sparkcap.store.warehouse import open_warehouse

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


def compare(db_path: Path, run_a: str, run_b: str) -> dict[str, pd.DataFrame]:
    params = {"a": run_a, "b": run_b}
    out: dict[str, pd.DataFrame] = {}
    with open_warehouse(db_path, read_only=True) as con:
        require_runs(con, db_path, [run_a, run_b])
        for name, sql in (
            ("levels", LEVELS_SQL),
            ("capacity", CAPACITY_SQL),
            ("prefill_links", PREFILL_SQL),
        ):
            out[name] = con.sql(sql, params=params).to_arrow_table().to_pandas()
    return out
