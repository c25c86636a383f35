{#
  Runs whose raw data changed since this incremental model last saw them: a run is rebuilt
  when any of its waves was (re)staged, or validated, after the watermark stored with it, or
  when it was built with other judgement settings (vars) than this build's.
  A new night therefore costs one night of work, and a re-staged run replaces itself.
#}
{% macro changed_runs_filter(run_id_column='run_id') -%}
    {% if is_incremental() -%}
    {%- set have = adapter.get_columns_in_relation(this) | map(attribute='name') | list -%}
    {%- if 'judgement_settings' not in have -%}
    true  {#- a table from before settings were stored: rebuild every run once -#}
    {%- else -%}
    {{ run_id_column }} in (
        select w.run_id
        from {{ ref('int_run_watermarks') }} as w
        left join (
            select run_id, max(run_watermark) as seen,
                bool_or(judgement_settings is distinct from {{ judgement_settings() }})
                    as other_settings
            from {{ this }} group by run_id
        ) as t
            on t.run_id = w.run_id
        where t.seen is null or w.run_watermark > t.seen or t.other_settings
    )
    {%- endif -%}
    {%- else -%}
    true
    {%- endif %}
{%- endmacro %}
