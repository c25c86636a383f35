{#
  Runs whose raw data changed since this incremental model last saw them: a run is rebuilt
  when any of its waves was (re)staged, or validated, after the watermark stored with it.
  A new night therefore costs one night of work, and a re-staged run replaces itself.
#}
{% macro changed_runs_filter(run_id_column='run_id') -%}
    {% if is_incremental() -%}
    {{ run_id_column }} in (
        select w.run_id
        from {{ ref('int_run_watermarks') }} as w
        left join (select run_id, max(run_watermark) as seen from {{ this }} group by run_id) as t
            on t.run_id = w.run_id
        where t.seen is null or w.run_watermark > t.seen
    )
    {%- else -%}
    true
    {%- endif %}
{%- endmacro %}
