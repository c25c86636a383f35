{#
  The regression gate, written once: a later run regressed, for a deployment x workload the
  earlier run measured, where
    - the later run has no row for it at all ('missing': a deployment down, another fleet's
      night): never measured, so never shown to hold;
    - the later run has a row but measured nothing ('not measured');
    - the later run's capacity interval lies wholly below the earlier's ('below').
  Otherwise the pair held ('held'): an interval that overlaps the earlier one is no evidence of
  a regression, whatever the point capacities say. A pair the earlier run did not measure is
  not judged (nothing was shown to hold, so nothing can be lost).

  A capacity's interval: the bootstrap's (grid) or the search's bracket (its high end is the
  level below the first that clearly failed), and the capacity itself, whichever reach further.
  A lower bound (every level tested passed) has no high end, so it never lies wholly below.

  `capacities`: a relation with fct_capacity's columns (run_id, deployment, workload,
  capacity_streams, is_measured, is_lower_bound, ci_low_streams, ci_high_streams,
  search_low_streams, search_high_streams); `run_pairs`: a relation of (earlier_run_id,
  later_run_id). fct_capacity_regressions judges each run against the run before it; `sparkcap
  compare A B --fail-on regression` compiles this macro and judges any two runs with it.
#}
{% macro capacity_interval_streams(capacities) -%}
    select
        run_id,
        deployment,
        workload,
        capacity_streams,
        is_measured,
        least(
            capacity_streams,
            coalesce(ci_low_streams, capacity_streams),
            coalesce(search_low_streams, capacity_streams)
        ) as low_streams,
        case when not is_lower_bound then
            greatest(
                capacity_streams,
                coalesce(ci_high_streams, capacity_streams),
                coalesce(search_high_streams - 1, capacity_streams)
            )
        end as high_streams
    from {{ capacities }}
{%- endmacro %}

{% macro regression_gate(capacities, run_pairs) -%}
with gate_intervals as (
    {{ capacity_interval_streams(capacities) }}
),

gate_judged as (
    select
        p.earlier_run_id,
        p.later_run_id,
        e.deployment,
        e.workload,
        e.capacity_streams as earlier_capacity_streams,
        e.low_streams as earlier_low_streams,
        e.high_streams as earlier_high_streams,
        l.capacity_streams as later_capacity_streams,
        l.low_streams as later_low_streams,
        l.high_streams as later_high_streams,
        l.is_measured as later_is_measured,
        case
            when l.run_id is null then 'missing'
            when not l.is_measured then 'not measured'
            when l.high_streams < e.low_streams then 'below'
            else 'held'
        end as gate_verdict
    from {{ run_pairs }} as p
    inner join gate_intervals as e
        on e.run_id = p.earlier_run_id and e.is_measured
    left join gate_intervals as l
        on l.run_id = p.later_run_id and l.deployment = e.deployment
        and l.workload = e.workload
)

select *, gate_verdict <> 'held' as is_regression
from gate_judged
{%- endmacro %}
