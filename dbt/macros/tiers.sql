{#
  Capacity tiers: the capacity rule (macros/capacity_rule.sql) at several per-stream
  thresholds, each alone and with each TTFT p90 ceiling, from the levels a night already
  measured (int_tier_levels, fct_capacity_tiers). The threshold of record stays the fleet's.
#}

{#- The tiers as a relation (threshold_tok_s double, ttft_p90_ceiling_s double, NULL: no
    ceiling): every threshold of var('tier_thresholds_tok_s') and the fleet's own
    var('threshold_tok_s'), each with no ceiling and with each of
    var('tier_ttft_p90_ceilings_s'); duplicates once. -#}
{% macro capacity_tiers() -%}
    {%- set thresholds = [var('threshold_tok_s') | float] -%}
    {%- for t in var('tier_thresholds_tok_s') -%}
        {%- if (t | float) not in thresholds -%}{%- do thresholds.append(t | float) -%}{%- endif -%}
    {%- endfor -%}
    {%- set ceilings = [] -%}
    {%- for c in var('tier_ttft_p90_ceilings_s') -%}
        {%- if (c | float) not in ceilings -%}{%- do ceilings.append(c | float) -%}{%- endif -%}
    {%- endfor -%}
    select * from (values
    {%- for t in thresholds | sort %}
        ({{ t }}::double, null::double){% for c in ceilings | sort %},
        ({{ t }}::double, {{ c }}::double){% endfor %}{{ ',' if not loop.last }}
    {%- endfor %}
    ) as tiers (threshold_tok_s, ttft_p90_ceiling_s)
{%- endmacro %}


{#- The tier of record (the fleet's threshold, no ceiling) is fct_capacity's capacity, row for
    row: one rule, never a second copy. Returns the rows that differ or are missing. -#}
{% test tier_of_record_is_the_capacity(model) %}
with tier as (
    select run_id, deployment, workload, capacity_streams, is_lower_bound, is_measured
    from {{ model }}
    where is_threshold_of_record
),

capacity as (
    select run_id, deployment, workload, capacity_streams, is_lower_bound, is_measured
    from {{ ref('fct_capacity') }}
)

select
    coalesce(t.run_id, c.run_id) as run_id,
    coalesce(t.deployment, c.deployment) as deployment,
    coalesce(t.workload, c.workload) as workload,
    t.capacity_streams as tier_capacity_streams,
    c.capacity_streams
from tier as t
full outer join capacity as c
    on c.run_id = t.run_id and c.deployment = t.deployment and c.workload = t.workload
where t.run_id is null or c.run_id is null
    or t.capacity_streams is distinct from c.capacity_streams
    or t.is_lower_bound is distinct from c.is_lower_bound
    or t.is_measured is distinct from c.is_measured
{% endtest %}
