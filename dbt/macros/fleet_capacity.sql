{#
  The fleet capacity formula, written once: per workload, the sum over deployments of each
  deployment's capacity counted once per replica (code and prose are alternative workloads,
  not a simultaneous mixed load). `capacity` is a relation of fct_capacity rows, `group_cols`
  what the sum is grouped by besides the workload ('c.run_id,' per night in
  fct_fleet_capacity; nothing in marts.fleet_capacity_of, one sum over a report's runs).
#}
{% macro fleet_capacity_per_workload(capacity, deployments, group_cols) %}
    select
        {{ group_cols }}
        c.workload,
        any_value(c.threshold_tok_s) as threshold_tok_s,
        sum(c.capacity_streams * coalesce(d.replicas, 1)) as capacity_streams,
        sum(c.capacity_interpolated * coalesce(d.replicas, 1)) as capacity_interpolated,
        sum(c.ci_low_streams * coalesce(d.replicas, 1)) as ci_low_streams,
        sum(c.ci_high_streams * coalesce(d.replicas, 1)) as ci_high_streams,
        count(*) as n_deployments,
        -- a sweep that ran but measured nothing (is_measured false) adds 0 to the sum: the
        -- fleet figure is then partial, never "0 streams" as if the deployment were too slow
        count(*) filter (where c.is_measured) as n_measured_deployments,
        sum(coalesce(d.replicas, 1)) as n_replicas,
        bool_or(coalesce(d.replicas, 1) > 1) as is_extrapolated,
        string_agg(c.deployment, ', ' order by c.deployment) filter (
            where coalesce(d.replicas, 1) > 1
        ) as extrapolated_deployments,
        bool_or(c.is_lower_bound) as is_lower_bound,
        'alternative workload, not a mixed load' as load_kind
    from {{ capacity }} as c
    left join {{ deployments }} as d on d.run_id = c.run_id and d.deployment = c.deployment
    group by {{ group_cols }} c.workload
{% endmacro %}


{#
  Table macros for a report over several runs (`sparkcap report --run A --run B`, `--night`):
  hand-made sweeps of several deployments read as one report. Created after every build, so
  they always match the marts they read.
  - capacity_of(runs): each deployment x workload's capacity row from the newest of `runs`
    that measured it;
  - fleet_capacity_of(runs): the fleet formula above over those rows, with the deployments
    the runs tried but none measured, or whose sweep of the workload measured nothing (and
    why), as in fct_fleet_capacity.
  A run that built only some models (validation's frames, a link check's health) into a
  warehouse whose marts were never built has nothing for them to read: they wait for a build.
#}
{% macro create_report_macros() %}
    {% set missing = [] %}
    {% if execute %}
        {% for name in ['fct_capacity', 'dim_deployments', 'fct_step_outcomes'] %}
            {% if adapter.get_relation(
                database=target.database, schema='marts', identifier=name
            ) is none %}
                {% do missing.append(name) %}
            {% endif %}
        {% endfor %}
    {% endif %}
    {% if execute and not missing %}
        {% do run_query("create schema if not exists marts") %}
        {% do run_query(
            "create or replace macro marts.capacity_of(runs) as table "
            ~ "select c.* from marts.fct_capacity as c join raw.runs as r using (run_id) "
            ~ "where list_contains(runs, c.run_id) "
            ~ "qualify row_number() over (partition by c.deployment, c.workload "
            ~ "order by r.started_at desc, c.run_id desc) = 1"
        ) %}
        {% set per_workload = fleet_capacity_per_workload(
            "marts.capacity_of(runs)", "marts.dim_deployments", ""
        ) %}
        {% do run_query(
            "create or replace macro marts.fleet_capacity_of(runs) as table "
            ~ "with per_workload as (" ~ per_workload ~ "), "
            ~ "missing as ("
            ~ "  select null::varchar as workload, deployment, coalesce(reason, outcome) as reason "
            ~ "  from marts.fct_step_outcomes "
            ~ "  where list_contains(runs, run_id) and is_failed and step in ('preflight', 'sweep') "
            ~ "    and deployment not in (select deployment from marts.capacity_of(runs)) "
            ~ "  union all "
            ~ "  select workload, deployment, capacity_verdict from marts.capacity_of(runs) "
            ~ "  where not is_measured), "
            ~ "not_measured as ("
            ~ "  select p.workload, "
            ~ "  string_agg(distinct u.deployment, ', ' order by u.deployment) as deployments, "
            ~ "  string_agg(distinct u.deployment || ': ' || u.reason, '; ' "
            ~ "    order by u.deployment || ': ' || u.reason) as reasons "
            ~ "  from per_workload as p join missing as u "
            ~ "    on u.workload is null or u.workload = p.workload "
            ~ "  group by p.workload) "
            ~ "select p.*, m.deployments as not_measured_deployments, "
            ~ "m.reasons as not_measured_reasons, m.deployments is null as is_complete "
            ~ "from per_workload as p left join not_measured as m using (workload)"
        ) %}
    {% endif %}
{% endmacro %}
