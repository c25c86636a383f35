{#
  The search's level rule, written once. `int_search_levels` (the verdict of record) and the
  live search (sparkcap/transform/live_judge.py, which compiles this macro once per night and runs it
  in-process on the live figures of the level just measured) both call it, so a search decides
  with the very SQL the marts judge by.

  `streams` is a relation with one row per counted stream:
    level_key (varchar), trial (integer), decode_tok_s (double), confidence (double)
  Returned, one row per level_key: n_trials, n_samples, median_decode_tok_s (median of trial
  medians), ci_low_tok_s / ci_high_tok_s (the seeded bootstrap of that median,
  macros/level_bootstrap.sql, the one fct_levels' interval comes from) and the verdict at the
  threshold:
  'pass' (interval above it), 'fail' (below), 'straddles' (neither, or fewer than
  var('search_min_samples') stream rates: one stream's rate is no interval),
  too_few_stream_rates (that last case, so that neither reader words it as an interval that
  straddles) and passes_median, the direction a straddling level sends the search (the grid's
  rule).
#}
{% macro search_level_interval(streams) -%}
with s_boot as (
    {{ level_bootstrap(streams) }}
),

s_confidence as (
    select level_key, any_value(confidence) as confidence
    from {{ streams }}
    where decode_tok_s is not null
    group by level_key
),

s_interval as (
    select
        b.level_key,
        any_value(b.n_trials) as n_trials,
        any_value(b.n_samples) as n_samples,
        any_value(c.confidence) as confidence,
        any_value(b.median_decode_tok_s) as median_decode_tok_s,
        {{ bootstrap_interval(
            'b.boot_median_tok_s',
            '(1 - any_value(c.confidence)) / 2',
            '(1 + any_value(c.confidence)) / 2'
        ) }}
    from s_boot as b
    inner join s_confidence as c on c.level_key = b.level_key
    group by b.level_key
)

select
    *,
    coalesce(median_decode_tok_s >= {{ var('threshold_tok_s') }}, false) as passes_median,
    n_samples < {{ var('search_min_samples') }} as too_few_stream_rates,
    case
        when n_samples < {{ var('search_min_samples') }} then 'straddles'
        when ci_low_tok_s >= {{ var('threshold_tok_s') }} then 'pass'
        when ci_high_tok_s < {{ var('threshold_tok_s') }} then 'fail'
        else 'straddles'
    end as verdict
from s_interval
{%- endmacro %}


{#- A capacity figure capped below the smallest level whose sustain wave fell (a column
    first_unsustained_streams in scope). DuckDB's least() skips NULLs, so a missing value
    stays missing and only a fallen sustain caps. -#}
{% macro capped_below_fallen_sustain(column) -%}
    case
        when {{ column }} is not null and first_unsustained_streams is not null
            then least({{ column }}, first_unsustained_streams - 1)
        else {{ column }}
    end
{%- endmacro %}


{#- The first failing level once a search's sustain waves are heard (a column
    first_unsustained_streams in scope): a full-length sustain wave that fell at N decides
    every level at and above N, whatever the short trials there said, so the first failing
    level is the lower of the levels' own and N (least() skips NULLs: either alone stands). A
    capacity with a fallen sustain wave above it is therefore no lower bound. -#}
{% macro first_failing_with_sustain(column) -%}
    least({{ column }}, first_unsustained_streams)
{%- endmacro %}
