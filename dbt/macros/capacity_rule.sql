{#
  The capacity rule, written once. int_levels/int_capacity (the figure of record) and
  int_capacity_bootstrap (the same rule on resampled level medians) both call these, so the
  interval always brackets the number it belongs to.
#}

{#- A level passes when it has a valid trial, no counted trial queued streams, and its median
    (over valid trials, or one bootstrap sample of it) reaches the threshold. -#}
{% macro level_passes(median_tok_s, any_queued, has_valid_trial='true') -%}
    coalesce(
        ({{ has_valid_trial }})
        and not ({{ any_queued }})
        and ({{ median_tok_s }}) >= {{ var('threshold_tok_s') }},
        false
    )
{%- endmacro %}

{#- Capacity: the largest tested level that passes with every smaller tested level passing,
    i.e. the largest passing level below the first failing one (an aggregate over a group's
    levels; `first_failing_level` is NULL when every level passes). -#}
{% macro capacity_level(concurrency, passes, first_failing_level) -%}
    max({{ concurrency }}) filter (
        where {{ passes }}
            and ({{ first_failing_level }} is null or {{ concurrency }} < {{ first_failing_level }})
    )
{%- endmacro %}
