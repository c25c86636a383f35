-- An open-loop replay's verdict per deployment: what it was offered (raw.replay_offers) set
-- against what it observed after its warm-up (var replay_warmup_share of the schedule, which
-- fills an empty server), judged by the level rule's threshold. It holds when every request
-- ended ok, the median decode rate of each workload it carried is >= var threshold_tok_s and,
-- where enough samples support the tail (macro tail_min_samples), the TTFT p90 from the
-- scheduled start is <= var ttft_ceiling_s, and its long prompts kept the plan's prefill
-- budget: decode beside their prefills (int_replay_prefills) below the threshold at most
-- the share the plan's budget allows (fct_plan.max_below_threshold_share, stored with the
-- replay's offer) of the counted time, measured rather than scaled from a probe. A client that sent more than
-- var replay_max_late_share of its requests later than var replay_max_send_lag_s behind
-- schedule gives no verdict (its lateness is measured and shown, never blamed on the server).
-- A share, not the single worst send: one late send is one late request, whose wait its TTFT
-- from the scheduled start already carries; it is a client that cannot keep the schedule which
-- offers a load nobody planned (one 0.3 s hiccup of a loaded machine voided a whole replay).
--
-- A median is judged with its uncertainty: a workload fails on its rate only when the 90 %
-- interval of its median (order statistics: ranks n/2 -+ 1.645 sqrt(n)/2) lies wholly below
-- the threshold. A backlog that keeps building is judged too: where the streams in flight
-- rise through each quarter of the counted time, the last quarter's exceeding the first's by
-- more than var replay_climb_share (and by at least var replay_climb_min_streams), while the
-- median TTFT rises too, the replay did not reach a steady state (four quarters rising in
-- turn by chance is 1 in 24 for a steady load, before the size of the rise). It fails when its warm-up lasted the settling time the
-- open-loop model gives (int_replay_predictions, settle_s) or the model has no steady state
-- there; otherwise it is too short to decide, named with the duration whose warm-up would
-- cover that time, never "holds". Beside the verdict: what the model predicted for the offer
-- (median rate per workload, streams in flight) and the prediction error.
{#- the offer's figures a row carries, replayed or not (unreplayed, below) -#}
{% set offer_columns = [
    'rate_factor', 'duration_s', 'seed', 'replay_id', 'planned_streams', 'code_per_s',
    'prose_per_s', 'long_per_min', 'client_stall_s'
] %}
with offers as (
    select * from {{ ref('stg_replay_offers') }}
),

-- a replay that never ran, or was interrupted, is judged by no figure (unreplayed, below)
streams as (
    select * from {{ ref('int_replay_streams') }}
    where wave_id not in (select wave_id from offers where not_replayed_reason is not null)
),

predictions as (
    select * from {{ ref('int_replay_predictions') }}
),

ranked as (
    -- each counted stream's rank within its workload, for the median's interval
    select wave_id, workload, decode_tok_s,
        row_number() over (partition by wave_id, workload order by decode_tok_s) as rate_rank,
        count(*) over (partition by wave_id, workload) as n_rates
    from streams
    where is_counted and workload in ('code', 'prose') and decode_tok_s is not null
),

intervals as (
    select wave_id,
        max(decode_tok_s) filter (where workload = 'code' and rate_rank
            = greatest(1, floor(n_rates / 2.0 - 1.645 * sqrt(n_rates) / 2))) as code_ci_low_tok_s,
        max(decode_tok_s) filter (where workload = 'code' and rate_rank
            = least(n_rates, ceil(1 + n_rates / 2.0 + 1.645 * sqrt(n_rates) / 2)))
            as code_ci_high_tok_s,
        max(decode_tok_s) filter (where workload = 'prose' and rate_rank
            = greatest(1, floor(n_rates / 2.0 - 1.645 * sqrt(n_rates) / 2)))
            as prose_ci_low_tok_s,
        max(decode_tok_s) filter (where workload = 'prose' and rate_rank
            = least(n_rates, ceil(1 + n_rates / 2.0 + 1.645 * sqrt(n_rates) / 2)))
            as prose_ci_high_tok_s
    from ranked
    group by wave_id
),

quarter_figures as (
    -- the counted time cut in four: streams in flight (time-average) and the median TTFT from
    -- the scheduled start of the requests due in each quarter
    select
        s.wave_id,
        q.k,
        sum(greatest(0, least(s.ended_s, s.warmup_s + q.k * (s.duration_s - s.warmup_s) / 4)
                - greatest(s.due_s, s.warmup_s + (q.k - 1) * (s.duration_s - s.warmup_s) / 4)))
            / nullif(any_value((s.duration_s - s.warmup_s) / 4), 0) as in_flight,
        median(s.ttft_from_scheduled_s) filter (
            where s.is_counted and s.workload in ('code', 'prose')
                and s.due_s >= s.warmup_s + (q.k - 1) * (s.duration_s - s.warmup_s) / 4
                and s.due_s < s.warmup_s + q.k * (s.duration_s - s.warmup_s) / 4) as ttft_s
    from streams as s
    cross join (select unnest([1, 2, 3, 4]) as k) as q
    group by s.wave_id, q.k
),

quarters as (
    select
        wave_id,
        max(in_flight) filter (where k = 1) as first_quarter_in_flight,
        max(in_flight) filter (where k = 4) as last_quarter_in_flight,
        max(ttft_s) filter (where k = 1) as first_quarter_ttft_s,
        max(ttft_s) filter (where k = 4) as last_quarter_ttft_s,
        -- each quarter holds more streams than the one before
        bool_and(in_flight > prev_in_flight) filter (where k > 1) as quarters_rising
    from (
        select *, lag(in_flight) over (partition by wave_id order by k) as prev_in_flight
        from quarter_figures
    )
    group by wave_id
),

waves as (
    select wave_id, run_id, deployment, started_at from {{ ref('stg_waves') }}
),

prefills as (
    select
        wave_id,
        count(*) as n_long_prefills,
        count(decode_beside_tok_s) as n_long_prefills_measured,
        count(*) filter (where is_below_threshold) as n_long_prefills_below,
        sum(below_threshold_new_s) as prefill_below_threshold_s
    from {{ ref('int_replay_prefills') }}
    group by wave_id
),

in_flight as (
    select wave_id, max(streams_in_flight) as peak_streams_in_flight
    from {{ ref('fct_replay_concurrency') }}
    group by wave_id
),

observed as (
    select
        run_id,
        wave_id,
        deployment,
        count(*) as n_requests,
        count(*) filter (where status = 'ok') as n_ok,
        count(*) filter (where status <> 'ok') as n_failed,
        string_agg(distinct status, ', ' order by status) filter (where status <> 'ok')
            as failure_statuses,
        count(*) filter (where workload = 'code') as n_code,
        count(*) filter (where workload = 'prose') as n_prose,
        count(*) filter (where workload = 'long') as n_long,
        count(*) filter (where is_counted) as n_counted,
        median(decode_tok_s) filter (where is_counted and workload in ('code', 'prose'))
            as median_decode_tok_s,
        median(decode_tok_s) filter (where is_counted and workload = 'code')
            as code_median_decode_tok_s,
        median(decode_tok_s) filter (where is_counted and workload = 'prose')
            as prose_median_decode_tok_s,
        avg(case when decode_tok_s < {{ var('threshold_tok_s') }} then 1.0 else 0.0 end)
            filter (where is_counted and workload in ('code', 'prose') and decode_tok_s is not null)
            as share_below_threshold,
        -- Little's law read back: the time-average of streams in flight after the warm-up
        sum(greatest(0, least(ended_s, duration_s) - greatest(sent_ns / 1e9, warmup_s)))
            / nullif(any_value(duration_s) - any_value(warmup_s), 0) as mean_streams_in_flight,
        median(ttft_from_scheduled_s) filter (where is_counted and workload in ('code', 'prose'))
            as ttft_scheduled_median_s,
        quantile_cont(ttft_from_scheduled_s, 0.9)
            filter (where is_counted and workload in ('code', 'prose')) as ttft_scheduled_p90_s,
        quantile_cont(ttft_from_send_s, 0.9)
            filter (where is_counted and workload in ('code', 'prose')) as ttft_send_p90_s,
        -- the worst wait: a client's stall shows in the first and hides in the second
        max(ttft_from_scheduled_s) as ttft_scheduled_max_s,
        max(ttft_from_send_s) as ttft_send_max_s,
        cast(count(ttft_from_scheduled_s) filter (
            where is_counted and workload in ('code', 'prose')) as integer
        ) as ttft_samples,
        max(send_lag_s) as max_send_lag_s,
        quantile_cont(send_lag_s, 0.9) as send_lag_p90_s,
        cast(count(*) filter (where send_lag_s > {{ var('replay_max_send_lag_s') }}) as integer)
            as n_sent_late,
        cast(count(*) filter (where is_after_warmup and is_client_spoiled) as integer)
            as n_client_spoiled,
        cast(count(*) filter (where is_after_warmup and workload in ('code', 'prose')
            and decode_tok_s is not null) as integer) as n_rates_after_warmup,
        max(timing_error_bound) as max_timing_error_bound
    from streams
    group by run_id, wave_id, deployment
),

judged as (
    select
        o.*,
        {%- for column in offer_columns %}
        f.{{ column }},
        {%- endfor %}
        w.started_at,
        i.peak_streams_in_flight,
        coalesce(p.n_long_prefills, 0) as n_long_prefills,
        coalesce(p.n_long_prefills_measured, 0) as n_long_prefills_measured,
        coalesce(p.n_long_prefills_below, 0) as n_long_prefills_below,
        coalesce(p.prefill_below_threshold_s, 0.0) as prefill_below_threshold_s,
        coalesce(p.prefill_below_threshold_s, 0.0)
            / nullif(f.duration_s * (1 - {{ var('replay_warmup_share') }}), 0)
            as prefill_below_threshold_share,
        f.max_below_threshold_share,
        coalesce(f.long_per_min * f.rate_factor, 0) > 0 and coalesce(p.n_long_prefills, 0) = 0
            as long_prompts_untested,
        {{ tail_min_samples('0.9') }} as ttft_min_samples,
        o.ttft_samples >= {{ tail_min_samples('0.9') }} as ttft_p90_is_supported,
        o.n_sent_late / o.n_requests as late_share,
        o.n_sent_late <= {{ var('replay_max_late_share') }} * o.n_requests
            as client_kept_schedule,
        -- the client read its streams on time: the streams whose rates its stalls may have
        -- moved are at most the share var replay_max_late_share of those it decoded
        o.n_client_spoiled <= {{ var('replay_max_late_share') }} * o.n_rates_after_warmup
            as client_read_on_time,
        {{ var('threshold_tok_s') }} as threshold_tok_s,
        {{ var('ttft_ceiling_s') }} as ttft_ceiling_s,
        f.plan_kind,
        f.search_id,
        ci.code_ci_low_tok_s,
        ci.code_ci_high_tok_s,
        ci.prose_ci_low_tok_s,
        ci.prose_ci_high_tok_s,
        h.first_quarter_in_flight,
        h.last_quarter_in_flight,
        h.first_quarter_ttft_s,
        h.last_quarter_ttft_s,
        coalesce(h.quarters_rising, false)
            and h.last_quarter_in_flight
                > h.first_quarter_in_flight * (1 + {{ var('replay_climb_share') }})
            and h.last_quarter_in_flight - h.first_quarter_in_flight
                >= {{ var('replay_climb_min_streams') }}
            and h.last_quarter_ttft_s > h.first_quarter_ttft_s as is_climbing,
        pr.line_share as predicted_line_share,
        pr.predicted_code_median_tok_s,
        pr.predicted_prose_median_tok_s,
        pr.predicted_mean_in_flight,
        pr.predicted_steady,
        pr.settle_s as predicted_settle_s,
        -- the duration whose warm-up covers the settling time the model gives
        case when pr.settle_s is not null
            then ceil(pr.settle_s / {{ var('replay_warmup_share') }}) end as deciding_duration_s,
        o.code_median_decode_tok_s / nullif(pr.predicted_code_median_tok_s, 0) - 1
            as code_prediction_error,
        o.prose_median_decode_tok_s / nullif(pr.predicted_prose_median_tok_s, 0) - 1
            as prose_prediction_error,
        o.mean_streams_in_flight / nullif(pr.predicted_mean_in_flight, 0) - 1
            as in_flight_prediction_error
    from observed as o
    inner join offers as f on f.wave_id = o.wave_id
    left join waves as w on w.wave_id = o.wave_id
    left join in_flight as i on i.wave_id = o.wave_id
    left join prefills as p on p.wave_id = o.wave_id
    left join intervals as ci on ci.wave_id = o.wave_id
    left join quarters as h on h.wave_id = o.wave_id
    left join predictions as pr on pr.wave_id = o.wave_id
),

assessed as (
    select
        *,
        -- a workload's rate fails when its median's interval lies wholly below the threshold
        code_ci_high_tok_s < threshold_tok_s as code_fails,
        prose_ci_high_tok_s < threshold_tok_s as prose_fails,
        -- a backlog still building: failing where the warm-up had the model's settling time
        -- (or the model has no steady state), else too short to decide
        coalesce(is_climbing, false) and (
            predicted_steady is false
            or predicted_settle_s is null and predicted_line_share is not null
            or predicted_settle_s <= duration_s * {{ var('replay_warmup_share') }}
        ) as backlog_fails,
        coalesce(is_climbing, false) and predicted_settle_s > duration_s
            * {{ var('replay_warmup_share') }} as is_too_short
    from judged
),

final as (
    select
        *,
        list_filter([
            case when n_failed > 0
                then n_failed || ' of ' || n_requests || ' requests failed (' || failure_statuses
                    || ')' end,
            case when code_fails
                then 'code median ' || round(code_median_decode_tok_s, 1) || ' tok/s < '
                    || threshold_tok_s || ' (90 % interval ' || round(code_ci_low_tok_s, 1)
                    || '-' || round(code_ci_high_tok_s, 1) || ')' end,
            case when prose_fails
                then 'prose median ' || round(prose_median_decode_tok_s, 1) || ' tok/s < '
                    || threshold_tok_s || ' (90 % interval ' || round(prose_ci_low_tok_s, 1)
                    || '-' || round(prose_ci_high_tok_s, 1) || ')' end,
            case when backlog_fails
                then 'a backlog still building: ' || round(first_quarter_in_flight, 1) || ' -> '
                    || round(last_quarter_in_flight, 1) || ' streams in flight, TTFT '
                    || round(first_quarter_ttft_s, 2) || ' -> ' || round(last_quarter_ttft_s, 2)
                    || ' s over the counted time' end,
            case when ttft_p90_is_supported and ttft_scheduled_p90_s > ttft_ceiling_s
                then 'TTFT p90 from the scheduled start ' || round(ttft_scheduled_p90_s, 2)
                    || ' s > ' || ttft_ceiling_s || ' s' end,
            case when prefill_below_threshold_share > max_below_threshold_share
                then 'decode below the threshold beside long prefills '
                    || round(100 * prefill_below_threshold_share, 1) || ' % of the time > '
                    || round(100 * max_below_threshold_share, 1) || ' % (the prefill budget; '
                    || n_long_prefills_below || ' of ' || n_long_prefills || ' long prompts)' end
        ], lambda x: x is not null) as failures,
        -- the model, where it is off by more than var replay_prediction_tolerance
        list_filter([
            case when abs(code_prediction_error) > {{ var('replay_prediction_tolerance') }}
                then 'code median ' || round(100 * code_prediction_error) || ' %' end,
            case when abs(prose_prediction_error) > {{ var('replay_prediction_tolerance') }}
                then 'prose median ' || round(100 * prose_prediction_error) || ' %' end,
            case when abs(in_flight_prediction_error) > {{ var('replay_prediction_tolerance') }}
                then 'streams in flight ' || round(100 * in_flight_prediction_error) || ' %' end
        ], lambda x: x is not null) as model_misses,
        case
            when n_requests = 0 then 'nothing measured'
            when not client_kept_schedule or not client_read_on_time then 'no verdict'
            when n_failed > 0
                or code_fails
                or prose_fails
                or backlog_fails
                or (ttft_p90_is_supported and ttft_scheduled_p90_s > ttft_ceiling_s)
                or prefill_below_threshold_share > max_below_threshold_share
                then 'fails'
            when median_decode_tok_s is null then 'nothing measured'
            when is_too_short then 'too short'
            else 'holds'
        end as verdict
    from assessed
),

replayed as (
    select
        * exclude (failures, model_misses),
        case when len(model_misses) > 0
            then 'the model is off here: ' || array_to_string(model_misses, ', ')
                || ' (measured against predicted)'
        end as model_note,
        case verdict
            when 'holds' then 'holds: ' || round(mean_streams_in_flight, 1)
                || ' streams in flight on average at ' || round(median_decode_tok_s, 1) || ' tok/s'
                -- a median below the threshold whose interval reaches it: not shown to fail
                || case when code_median_decode_tok_s < threshold_tok_s
                        or prose_median_decode_tok_s < threshold_tok_s
                    then ' (a median below ' || threshold_tok_s || ' whose 90 % interval reaches it)'
                    else '' end
                -- a long prompt no stream decoded beside: its prefill budget is unchecked, said so
                || case when n_long_prefills > n_long_prefills_measured
                    then '; ' || (n_long_prefills - n_long_prefills_measured) || ' of '
                        || n_long_prefills || ' long prompts unmeasured (no stream decoded during '
                        || 'its prefill): the prefill budget unchecked on them'
                    else '' end
                -- long prompts routed here, none due in the counted time (a rate below one in the
                -- replay's duration rounds to none, or its one fell in the warm-up): its prefill
                -- budget untested, said so, with the duration whose counted time expects one
                || case when long_prompts_untested
                    then '; no long prompt in its counted time ('
                        || round(long_per_min * rate_factor, 2)
                        || ' a minute routed here, over ' || round(duration_s)::bigint
                        || ' s): the prefill '
                        || 'budget untested (a replay of '
                        || ceil(60.0 / (long_per_min * rate_factor
                            * (1 - {{ var('replay_warmup_share') }})))::bigint
                        || ' s or more expects one after its warm-up)'
                    else '' end
            when 'fails' then 'fails: ' || array_to_string(failures, '; ')
            when 'too short' then 'too short to decide: the streams in flight rose from '
                || round(first_quarter_in_flight, 1) || ' to ' || round(last_quarter_in_flight, 1)
                || ' over the counted time (a backlog still building); a replay of '
                || deciding_duration_s::bigint || ' s or more would decide'
            when 'no verdict' then 'no verdict: ' || array_to_string(list_filter([
                case when not client_kept_schedule
                    then 'the client sent ' || n_sent_late || ' of ' || n_requests
                        || ' requests more than ' || {{ var('replay_max_send_lag_s') }}
                        || ' s behind schedule, up to ' || round(max_send_lag_s, 2) || ' s' end,
                case when not client_read_on_time
                    then 'the client stalled while reading ' || n_client_spoiled
                        || ' of ' || n_rates_after_warmup || ' streams, their rates off by up '
                        || 'to ' || round(100 * max_timing_error_bound, 1) || ' % (var '
                        || 'timing_error_tolerance ' || {{ var('timing_error_tolerance') }}
                        || '): their figures are left out' end
                ], lambda x: x is not null), '; ')
                || ' (var replay_max_late_share ' || {{ var('replay_max_late_share') }} || ')'
            else 'nothing measured: no request of this replay decoded'
        end as verdict_text
    from final
),

-- a planned deployment whose replay never ran (its server down, its preflight refused): a row
-- of its own, so the fleet's verdict counts it and never holds without it
unreplayed as (
    select
        w.run_id,
        f.wave_id,
        w.deployment,
        0 as n_requests,
        0 as n_failed,
        0 as n_sent_late,
        0 as n_client_spoiled,
        0 as ttft_samples,
        false as ttft_p90_is_supported,
        0 as n_long_prefills,
        0 as n_long_prefills_measured,
        0 as n_long_prefills_below,
        {%- for column in offer_columns %}
        f.{{ column }},
        {%- endfor %}
        w.started_at,
        f.max_below_threshold_share,
        false as long_prompts_untested,
        {{ var('threshold_tok_s') }} as threshold_tok_s,
        {{ var('ttft_ceiling_s') }} as ttft_ceiling_s,
        f.plan_kind,
        f.search_id,
        'not replayed' as verdict,
        'not replayed: ' || f.not_replayed_reason as verdict_text
    from offers as f
    inner join waves as w on w.wave_id = f.wave_id
    where f.not_replayed_reason is not null
),

final_rows as (
    select * from replayed
    union all by name
    select * from unreplayed
)

select * from final_rows
