{#- Each fact of a run's deployment from its best source: the lowest `source_rank` (the
    model's fixed precedence; a source it does not rank gives no fact), the latest recorded
    among equals. Used by int_deployment_facts and int_run_context. -#}
{% macro best_source_facts(relation) -%}
    select *
    from {{ relation }}
    where source_rank is not null
    qualify row_number() over (
        partition by run_id, deployment, fact order by source_rank, recorded_at desc
    ) = 1
{%- endmacro %}
