{#
  A wave the client, not the server, spoiled: the one place the rule and its words are written.
  Two causes qualify, both judged against the streams' own durations (docs/concepts/
  recording-rules.md, "Client timing"): loop stalls near first/last tokens (the wave's
  timing_error_bound, a share of a stream's decode span) above var timing_error_tolerance,
  and a ragged release (the wave's start skew) above var start_skew_tolerance of the median
  decode span. int_trial_validity applies it to the stored waves; the capture compiles
  client_spoiled_waves (transform/live_judge.py) to decide whether to measure a wave again,
  so a wave is re-measured exactly when dbt will call it spoiled, in the words dbt records.
#}

{#- The median of a wave's decode spans (first to last token), seconds: an aggregate. -#}
{% macro median_decode_span_s(first_token_ns, last_token_ns) -%}
    median({{ last_token_ns }} - {{ first_token_ns }}) filter (
        where {{ first_token_ns }} is not null and {{ last_token_ns }} is not null
    ) / 1e9
{%- endmacro %}


{% macro client_timing_spoiled(timing_error_bound) -%}
    coalesce({{ timing_error_bound }} > {{ var('timing_error_tolerance') }}, false)
{%- endmacro %}


{% macro client_release_spoiled(start_skew_ms, median_decode_span_s) -%}
    coalesce(
        {{ start_skew_ms }} / 1e3 / nullif({{ median_decode_span_s }}, 0)
        > {{ var('start_skew_tolerance') }},
        false
    )
{%- endmacro %}


{#- Each cause's reason (NULL where it does not apply), as a wave's invalid_reasons and a
    re-measured wave's superseded_reason say it. -#}
{% macro client_timing_reason(timing_error_bound) -%}
    case when {{ client_timing_spoiled(timing_error_bound) }}
        then printf(
            'client timing: error bound %.2f%% > %.2f%%',
            100 * {{ timing_error_bound }}, 100 * {{ var('timing_error_tolerance') }}::double
        ) end
{%- endmacro %}


{% macro client_release_reason(start_skew_ms, median_decode_span_s) -%}
    case when {{ client_release_spoiled(start_skew_ms, median_decode_span_s) }}
        then printf(
            'client release: start skew %.1f ms > %.0f%% of the median decode span',
            {{ start_skew_ms }}, 100 * {{ var('start_skew_tolerance') }}::double
        ) end
{%- endmacro %}


{#- One row per wave of `streams` (one row per stream: wave_id, first_token_ns,
    last_token_ns, and its wave's timing_error_bound and start_skew_ms): why the client
    spoiled it, the reasons joined by '; ' (NULL: it did not). -#}
{% macro client_spoiled_waves(streams) -%}
with cs_waves as (
    select
        wave_id,
        any_value(timing_error_bound) as timing_error_bound,
        any_value(start_skew_ms) as start_skew_ms,
        {{ median_decode_span_s('first_token_ns', 'last_token_ns') }} as median_decode_span_s
    from {{ streams }}
    group by wave_id
)
select
    wave_id,
    nullif(array_to_string(list_filter([
        {{ client_timing_reason('timing_error_bound') }},
        {{ client_release_reason('start_skew_ms', 'median_decode_span_s') }}
    ], lambda x: x is not null), '; '), '') as client_spoiled_reason
from cs_waves
{%- endmacro %}
