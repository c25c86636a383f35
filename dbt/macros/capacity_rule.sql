{#
  The capacity rule, written once. int_levels/int_capacity (the figure of record) and
  int_capacity_bootstrap (the same rule on resampled level medians) both call these, so the
  interval always brackets the number it belongs to.
#}

{#- A level passes when it has a valid trial, no counted trial queued streams, and its median
    (over valid trials, or one bootstrap sample of it) reaches the threshold: the fleet's
    (var('threshold_tok_s')) unless `threshold_tok_s` names another, as a capacity tier does
    (int_tier_levels). A tier may also set a TTFT ceiling: then the level's TTFT p90 must not
    exceed it (a NULL ceiling is none; a NULL p90 under a ceiling does not pass). Without these
    arguments the SQL is the figure of record's, unchanged. -#}
{% macro level_passes(
    median_tok_s, any_queued, has_valid_trial='true', threshold_tok_s=none,
    ttft_p90_s=none, ttft_p90_ceiling_s=none
) -%}
    coalesce(
        ({{ has_valid_trial }})
        and not ({{ any_queued }})
        and ({{ median_tok_s }}) >= {{ var('threshold_tok_s') if threshold_tok_s is none
            else threshold_tok_s }}
        {%- if ttft_p90_ceiling_s is not none %}
        and (({{ ttft_p90_ceiling_s }}) is null or ({{ ttft_p90_s }}) <= ({{ ttft_p90_ceiling_s }}))
        {%- endif %},
        false
    )
{%- endmacro %}

{#- A stream's time to first token, s (queueing and prefill): from the instant its request
    was complete to its first content chunk (ns offsets from the wave's anchor). -#}
{% macro ttft_seconds(first_token_ns, sent_ns) -%}
    ({{ first_token_ns }} - {{ sent_ns }}) / 1e9
{%- endmacro %}

{#- The TTFT an agent level is held to, written once: a trial's turns' TTFT at
    var('ttft_quantile') (int_trials, and the live search judge on its waves so far). -#}
{% macro ttft_quantile(ttft_s) -%}
    quantile_cont({{ ttft_s }}, {{ var('ttft_quantile') }})
{%- endmacro %}

{#- The live search's TTFT rule for an agent level: each wave's TTFT quantile over its turns
    (`turns`: wave_id, ttft_s), their median, and whether the level rule (level_passes, its
    ceiling part alone) lets it pass, as int_levels judges the level. `turns`: wave_id,
    first_token_ns, sent_ns. -#}
{% macro session_ttft_within_ceiling(turns) -%}
with t_waves as (
    select
        wave_id,
        {{ ttft_quantile(ttft_seconds('first_token_ns', 'sent_ns')) }} as ttft_quantile_s
    from {{ turns }}
    group by wave_id
)

select
    median(ttft_quantile_s) as ttft_quantile_s,
    {{ within_session_ttft_ceiling('median(ttft_quantile_s)') }} as within_ceiling
from t_waves
{%- endmacro %}

{#- The ceiling part of the level rule alone (level_passes with every other part met), for
    the search's verdicts on an agent level. -#}
{% macro within_session_ttft_ceiling(ttft_quantile_s) -%}
    {{ level_passes(
        '1', 'false', 'true', threshold_tok_s='0',
        ttft_p90_s=ttft_quantile_s, ttft_p90_ceiling_s=var('ttft_ceiling_s')
    ) }}
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

{#- A first failing level without a valid trial is no measured failure: its level and the
    reason, as columns unmeasured_level and unmeasured_reason (NULL where it was measured).
    `first_failing`: the first failing level's row (concurrency, no_valid_trial_reason). -#}
{% macro unmeasured_first_failure(first_failing) -%}
    case when {{ first_failing }}.no_valid_trial_reason is not null
        then {{ first_failing }}.concurrency end as unmeasured_level,
    {{ first_failing }}.no_valid_trial_reason as unmeasured_reason
{%- endmacro %}

{#- A capacity is measured unless no level passed and the first failing (the lowest) level
    had no valid trial: 0 streams is then no verdict. -#}
{% macro capacity_is_measured(capacity_level, unmeasured_level) -%}
    not ({{ capacity_level }} is null and {{ unmeasured_level }} is not null)
{%- endmacro %}


{#- Queued by overlap, written once: a stream decodes from its first to its last content
    chunk; when fewer streams ever decode at once than decoded in all, some stream only
    started after another had finished, i.e. the server queued it (fewer slots than streams).
    At one instant an end sorts before a start, so streams that only touch did not overlap.
    A stamp may read late (or early) by as long as its bytes sat unread, at most the wave's
    worst event-loop lag: at a slot's hand-off the finished stream's last stamp then crossed
    the next stream's first by 0.2 ms beside two CPU burners, and four streams on two slots
    read as four at once (not queued). So each window ends its slack earlier (the wave's
    `loop_lag_max_ms`, at least var('overlap_stamp_slack_ms')): streams decoding together
    overlap by far more, for all their decode. A window no longer than its slack (a stream
    whose content all arrived at one instant: one chunk, a proxy that buffers) shows neither
    overlap nor its absence and is not counted as decoded (counted, its own end sorting
    before its start made it "queued" alone).
    `streams`: wave_id, first_token_ns, last_token_ns, loop_lag_max_ms (the wave's, NULL:
    the floor alone). Used by int_trials and, compiled, by the live search judge (which reads
    the first three columns by position). -#}
{% macro decode_overlap(streams) -%}
with o_streams as (
    select
        wave_id,
        first_token_ns,
        last_token_ns,
        cast(1e6 * greatest(
            coalesce(loop_lag_max_ms, 0), {{ var('overlap_stamp_slack_ms') }}
        ) as bigint) as slack_ns
    from {{ streams }}
),

o_windows as (
    select wave_id, first_token_ns, last_token_ns - slack_ns as end_ns
    from o_streams
    where last_token_ns - slack_ns > first_token_ns
),

o_events as (
    select wave_id, first_token_ns as at_ns, 1 as delta
    from o_windows
    union all
    select wave_id, end_ns as at_ns, -1 as delta
    from o_windows
),

o_decoding as (
    select
        wave_id,
        sum(delta) over (
            partition by wave_id order by at_ns, delta
            rows between unbounded preceding and current row
        ) as n_decoding
    from o_events
),

o_peak as (
    select wave_id, cast(max(n_decoding) as integer) as peak_concurrency
    from o_decoding
    group by wave_id
),

o_decoded as (
    select
        s.wave_id,
        count(w.wave_id) as n_decoded
    from (select distinct wave_id from o_streams) as s
    left join o_windows as w on w.wave_id = s.wave_id
    group by s.wave_id
)

select
    d.wave_id,
    p.peak_concurrency,
    coalesce(p.peak_concurrency, 0) < d.n_decoded as queued_by_overlap,
    d.n_decoded as n_decoded_with_window
from o_decoded as d
left join o_peak as p on p.wave_id = d.wave_id
{%- endmacro %}
