{#
  A model's column rules in one test: its columns that must not be null, that must be unique,
  that take only listed values, and the combination of columns that is its key (every row's
  combination, NULLs included, appears once). The one place these rules are written.
  Why one test, not one per column: a dbt test node costs ~15 ms of a build whatever its
  query; the 309 data tests were half of every build (measured on one replayed night: 10.4 s
  with them, 5.1 s without; 6.9 s with the 104 they fold into). The rules are dbt's own
  not_null, unique and accepted_values (a NULL is accepted by accepted_values and is not a
  duplicate for unique, as there). Each broken rule is one row (rule, column, rows breaking
  it), so a failure names what broke: sparkcap's build message reads these rows.
#}
{% test column_rules(model, not_null=[], unique=[], accepted_values={}, unique_combination=[]) %}
{%- set checks = [] -%}
{%- for column in not_null -%}
    {%- do checks.append(
        "select 'not_null' as rule, '" ~ column ~ "' as column_name, count(*) as n_rows from "
        ~ model ~ " where " ~ column ~ " is null"
    ) -%}
{%- endfor -%}
{%- for column in unique -%}
    {%- do checks.append(
        "select 'unique' as rule, '" ~ column ~ "' as column_name, coalesce(sum(n), 0) as n_rows"
        ~ " from (select count(*) as n from " ~ model ~ " where " ~ column ~ " is not null"
        ~ " group by " ~ column ~ " having count(*) > 1)"
    ) -%}
{%- endfor -%}
{%- for column, values in accepted_values.items() -%}
    {%- set quoted = [] -%}
    {%- for value in values -%}
        {%- do quoted.append("'" ~ (value | string | replace("'", "''")) ~ "'") -%}
    {%- endfor -%}
    {%- do checks.append(
        "select 'accepted_values' as rule, '" ~ column ~ "' as column_name, count(*) as n_rows"
        ~ " from " ~ model ~ " where " ~ column ~ " is not null and cast(" ~ column
        ~ " as varchar) not in (" ~ quoted | join(", ") ~ ")"
    ) -%}
{%- endfor -%}
{%- if unique_combination -%}
    {%- do checks.append(
        "select 'unique_combination' as rule, '" ~ unique_combination | join(', ')
        ~ "' as column_name, coalesce(sum(n), 0) as n_rows from (select count(*) as n from "
        ~ model ~ " group by " ~ unique_combination | join(', ') ~ " having count(*) > 1)"
    ) -%}
{%- endif -%}
select rule, column_name, n_rows
from (
    {{ checks | join("\n    union all\n    ") }}
) as checks
where n_rows > 0
{% endtest %}
