{{ config(materialized='incremental', unique_key='run_id', incremental_strategy='delete+insert') }}
-- depends_on: {{ ref('int_run_watermarks') }}

-- The level value: median over the level's valid trials (warm-ups and waves superseded by a
-- re-measurement never count). A level where any counted trial queued streams cannot pass,
-- whatever its rate. A level without a valid trial fails too; where it observed nothing of
-- the decode (every counted stream refused or unreadable, or every trial spoiled by the client
-- with its streams ended well) that failure is no measurement: `no_valid_trial_reason` says
-- why, so that nobody reads "too slow" where nothing was measured. Streams that timed out,
-- were cut or erred under load are the server failing the level: a measured failure.
with trials as (
    select * from {{ ref('int_trials') }}
    where {{ changed_runs_filter('run_id') }}
),

counted as (
    select * from trials
    where probe is null and trial > 0 and not coalesce(is_superseded, false)
),

stream_endings as (
    -- how the counted trials' streams ended, per status (and HTTP status when not 200)
    select
        t.run_id,
        t.deployment,
        t.workload,
        t.concurrency,
        s.status,
        s.status || coalesce(
            ' (' || case when s.http_status <> 200 then s.http_status end || ')', ''
        ) as ending,
        count(*) as n_streams
    from {{ ref('int_stream_rates') }} as s
    inner join counted as t on t.wave_id = s.wave_id
    group by all
),

level_streams as (
    select
        run_id,
        deployment,
        workload,
        concurrency,
        cast(sum(n_streams) as integer) as n_streams,
        cast(coalesce(sum(n_streams) filter (where status <> 'ok'), 0) as integer)
            as n_failed,
        -- refused or not an answer at all: such a stream observed nothing of the decode
        cast(coalesce(sum(n_streams) filter (
            where status in ('rejected', 'protocol_error')
        ), 0) as integer) as n_unanswered,
        count(*) filter (where status <> 'ok') as n_failure_kinds,
        any_value(ending) filter (where status <> 'ok') as only_failure,
        string_agg(n_streams || ' ' || ending, ', ' order by n_streams desc, ending)
            filter (where status <> 'ok') as failures
    from stream_endings
    group by all
),

final as (
    select
        run_id,
        deployment,
        any_value(model) as model,
        workload,
        -- grid or search: one plan per deployment and workload in a run
        any_value(method) as method,
        min(search_step) as search_step,
        concurrency,
        count(*) as n_trials,
        count(*) filter (where is_valid) as n_valid_trials,
        coalesce(sum(n_failed), 0) as n_failed_streams,
        median(median_decode_tok_s) filter (where is_valid) as median_decode_tok_s,
        min(min_decode_tok_s) filter (where is_valid) as min_decode_tok_s,
        max(max_decode_tok_s) filter (where is_valid) as max_decode_tok_s,
        median(aggregate_tok_s) filter (where is_valid) as aggregate_tok_s,
        concurrency * median(median_decode_tok_s) filter (where is_valid)
            as concurrency_x_median_tok_s,
        median(median_ttft_s) filter (where is_valid) as median_ttft_s,
        median(ttft_quantile_s) filter (where is_valid) as ttft_quantile_s,
        -- the TTFTs behind that figure: every valid trial's, pooled
        cast(coalesce(sum(n_ttft) filter (where is_valid), 0) as integer) as n_ttft_samples,
        -- agent sessions: the next turn's first token must come within the ceiling
        case when workload = 'agent' then {{ var('ttft_ceiling_s') }} end as ttft_ceiling_s,
        median(effective_concurrency) filter (where is_valid) as effective_concurrency,
        bool_or(queued) as any_queued,
        {{ var('threshold_tok_s') }} as threshold_tok_s,
        {{ level_passes(
            'median(median_decode_tok_s) filter (where is_valid)',
            'bool_or(queued)',
            'count(*) filter (where is_valid) > 0',
            ttft_p90_s='median(ttft_quantile_s) filter (where is_valid)',
            ttft_p90_ceiling_s="case when workload = 'agent' then "
                ~ var('ttft_ceiling_s') ~ " end"
        ) }} as passes_threshold,
        string_agg(distinct invalid_reasons, '; ' order by invalid_reasons) as trial_reasons,
        max(run_watermark) as run_watermark,
        {{ judgement_settings() }} as judgement_settings
    from counted
    group by run_id, deployment, workload, concurrency
)

select
    f.* exclude (trial_reasons),
    case
        -- a valid trial, or queued streams (the server could not hold the level: measured)
        when f.n_valid_trials > 0 or coalesce(f.any_queued, false) then null
        -- streams that failed while others got through, or that timed out, were cut or erred:
        -- the server failed at this level, a finding. Unmeasured is only a level where no
        -- counted stream was answered at all (every one refused or not an event stream) ...
        when s.n_failed > 0 and s.n_unanswered < s.n_streams then null
        -- failed streams first: a refusal or a broken stream is what a person needs to read
        when s.n_failed > 0 and s.n_failure_kinds = 1
            then s.n_failed || ' of ' || s.n_streams || ' ' || s.only_failure
        when s.n_failed > 0
            then s.n_failed || ' of ' || s.n_streams || ' streams failed: ' || s.failures
        else f.n_trials || ' of ' || f.n_trials || ' trial' || if(f.n_trials = 1, '', 's')
            || ' invalid: ' || coalesce(f.trial_reasons, 'no reason recorded')
    end as no_valid_trial_reason
from final as f
left join level_streams as s
    on s.run_id = f.run_id and s.deployment = f.deployment and s.workload = f.workload
    and s.concurrency = f.concurrency
