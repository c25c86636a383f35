{#-
  The project's tables and views, in one statement each. dbt's own materializations build into
  a temporary relation, rename the old one to a backup, rename the new one in and drop the
  backup, and dbt-duckdb's table asks the catalog about foreign keys, indexes, grants and
  comments on the way: about eight statements and as many catalog lookups a model, where this
  project declares none of those. DuckDB's `create or replace … as` replaces a relation
  atomically inside the model's transaction, so a reader never finds it missing or half built.
  A relation of the other type under the name (a model that changed kind) is dropped first.
-#}
{% macro _sparkcap_replace(kind, sql) %}
  {%- set existing_relation = load_cached_relation(this) -%}
  {%- set target_relation = this.incorporate(type=kind) -%}
  {{ run_hooks(pre_hooks, inside_transaction=False) }}
  {{ run_hooks(pre_hooks, inside_transaction=True) }}
  {% if existing_relation is not none and existing_relation.type != kind %}
    {{ adapter.drop_relation(existing_relation) }}
  {% endif %}
  {% call statement('main') -%}
    create or replace {{ kind }} {{ target_relation }} as (
      {{ sql }}
    )
  {%- endcall %}
  {{ run_hooks(post_hooks, inside_transaction=True) }}
  {{ adapter.commit() }}
  {{ run_hooks(post_hooks, inside_transaction=False) }}
  {% if existing_relation is none or existing_relation.type != kind %}
    {% do adapter.cache_added(target_relation) %}
  {% endif %}
  {{ return({'relations': [target_relation]}) }}
{% endmacro %}

{% materialization table, adapter="duckdb" %}
  {{ return(_sparkcap_replace('table', compiled_code)) }}
{% endmaterialization %}

{% materialization view, adapter="duckdb" %}
  {{ return(_sparkcap_replace('view', compiled_code)) }}
{% endmaterialization %}
