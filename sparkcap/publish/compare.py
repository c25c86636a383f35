"""``sparkcap compare RUN_A RUN_B``: the study's before/after question in one command.

Per deployment × workload × level: the change in median decode rate and aggregate
throughput; per deployment × workload: the change in capacity, beside each run's verdict (a
run that measured nothing has no change to show); per deployment: the change in
prefill throughput (from the prefill-interference probe) with link health beside it. Read
from the marts, so both runs must have been built.

``--fail-on regression`` (:func:`regressions`) turns it into a gate for CI: the later run
regressed where a capacity it measured lies wholly below the earlier run's (each capacity with
its interval, ``fct_capacity``'s bootstrap or search bracket), where it measured nothing that
the earlier run measured or has no row for it at all (a deployment down, another fleet's
night), or where ``fct_changes`` flagged it slower or lower than its baseline. A gate that
would compare nothing (a run without built capacities, an earlier run that measured none)
stops with one line instead of passing. Each of those is the marts' judgement (an interval,
a flag); nothing is re-tested here.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import duckdb
import pandas as pd

from sparkcap.errors import NotBuilt
from sparkcap.publish.marts import has_mart, require_runs
from sparkcap.store.connection import open_warehouse

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


# a capacity's interval: the bootstrap's (grid) or the search's bracket (its high end is the
# level below the first that clearly failed), and the capacity itself, whichever reach further;
# a lower bound (every level tested passed) has no high end, so it never lies wholly below
REGRESSED_CAPACITY_SQL = """
with c as (
    select run_id, deployment, workload, capacity_streams, is_measured,
           least(capacity_streams, coalesce(ci_low_streams, capacity_streams),
                 coalesce(search_low_streams, capacity_streams)) as low_streams,
           case when not is_lower_bound then
                greatest(capacity_streams, coalesce(ci_high_streams, capacity_streams),
                         coalesce(search_high_streams - 1, capacity_streams))
           end as high_streams
    from marts.fct_capacity where run_id in ($a, $b)
)
select a.deployment, a.workload, a.capacity_streams, a.low_streams, a.high_streams,
       b.capacity_streams, b.low_streams, b.high_streams, b.is_measured,
       b.deployment is not null as b_has_row
from c as a
left join c as b
    on b.deployment = a.deployment and b.workload = a.workload and b.run_id = $b
where a.run_id = $a and a.is_measured
  and (b.deployment is null or not b.is_measured or b.high_streams < a.low_streams)
order by 1, 2
"""

BUILT_SQL = """
select run_id, count(*) as n_rows, count(*) filter (where is_measured) as n_measured
from marts.fct_capacity where run_id in ($a, $b) group by run_id
"""

FLAGGED_SLOWER_SQL = """
select deployment, workload, subject, concurrency, change_pct, p_value, what_else_changed,
       verdict
from marts.fct_changes
where run_id = $b and is_change and direction in ('slower', 'lower')
order by deployment, workload, subject, concurrency
"""


class Regression(NamedTuple):
    """One reason the later run fails a ``--fail-on regression`` gate, in words."""

    deployment: str
    workload: str
    words: str


def _interval(capacity: int, low: int, high: int | None) -> str:
    if high is None:  # every level tested passed
        return f"≥ {capacity}" if low == capacity else f"≥ {capacity} [{low}, —]"
    if low == high == capacity:
        return f"{capacity}"
    return f"{capacity} [{low}, {high}]"


def _change_words(
    subject: str,
    concurrency: int | None,
    change_pct: float | None,
    p_value: float | None,
    also: str | None,
    verdict: str | None,
) -> str:
    """A flagged change as fct_changes words it: its verdict states the size, the p-value and
    what else changed, so nothing is added to it (the gate once printed "what else changed"
    twice). Only a change without a verdict is put in words here, from its columns."""
    if verdict:
        return f"{subject}: {verdict}"
    what = subject if concurrency is None else f"{subject} at {concurrency} streams"
    size = "" if change_pct is None else f" {change_pct:+.1f} %"
    p_words = "" if p_value is None else f", p {p_value:.2g}"
    also_words = f" (also changed: {also})" if also else ""
    return f"{what}{size}{p_words} vs its baseline: flagged{also_words}"


def regressions(db_path: Path, run_a: str, run_b: str) -> list[Regression]:
    """Where ``run_b`` is worse than ``run_a`` by the marts' own judgement (see the module's
    docstring); ``fct_changes``' flags count once that mart is built."""
    params = {"a": run_a, "b": run_b}
    found: list[Regression] = []
    with open_warehouse(db_path, read_only=True) as con:
        require_runs(con, db_path, [run_a, run_b])
        _require_compared(con, db_path, run_a, run_b)
        for row in con.execute(REGRESSED_CAPACITY_SQL, params).fetchall():
            dep, wl, a_cap, a_low, a_high, b_cap, b_low, b_high, b_measured, b_has_row = row
            if not b_has_row:
                words = (
                    f"not in {run_b}'s night ({_interval(a_cap, a_low, a_high)} streams in "
                    f"{run_a}): never measured, so never shown to hold"
                )
            elif not b_measured:
                words = f"capacity not measured in {run_b} ({_interval(a_cap, a_low, a_high)} "
                words += f"streams in {run_a})"
            else:
                words = (
                    f"capacity {_interval(b_cap, b_low, b_high)} streams, below "
                    f"{_interval(a_cap, a_low, a_high)} in {run_a}"
                )
            found.append(Regression(dep, wl, words))
        if has_mart(con, "fct_changes"):
            for dep, wl, subject, conc, pct, p, also, verdict in con.execute(
                FLAGGED_SLOWER_SQL, {"b": run_b}
            ).fetchall():
                found.append(
                    Regression(dep, wl, _change_words(subject, conc, pct, p, also, verdict))
                )
    return found


def _require_compared(
    con: duckdb.DuckDBPyConnection, db_path: Path, run_a: str, run_b: str
) -> None:
    """A gate that compared nothing never passes: both runs need built capacities, and the
    earlier run a measured one (else there is nothing a later run could fall below)."""
    if not has_mart(con, "fct_capacity"):
        raise NotBuilt(f"{db_path} has no built capacities: run `sparkcap build --db {db_path}`")
    built = {r: (n, m) for r, n, m in con.execute(BUILT_SQL, {"a": run_a, "b": run_b}).fetchall()}
    for run in (run_a, run_b):
        if run not in built:
            raise NotBuilt(
                f"run {run} has no built capacity (never built, or its build stopped): run "
                f"`sparkcap build --db {db_path}`; the gate compares nothing until it is"
            )
    if built[run_a][1] == 0:
        raise NotBuilt(
            f"run {run_a} measured no capacity, so the gate has nothing to compare {run_b} "
            "against: pick an earlier run that measured one"
        )


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
