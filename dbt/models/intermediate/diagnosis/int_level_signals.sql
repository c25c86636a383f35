-- Per run, deployment, workload and level: what the level's counted waves said, the server's
-- counters and the client's figures, beside the level's own figures. The bound on its rate is
-- int_level_diagnosis's, which reads this.
--
-- The level's waves: every counted trial (warm-ups and superseded attempts left out), valid or
-- not, since why a trial was invalid (queued, a spoiled client) is evidence too. Where a
-- search ran a full-length sustain wave at a level, that wave decides the level (macro
-- first_failing_with_sustain) and is the level's row here (`kind` 'sustain', its median from
-- int_search_levels); elsewhere the level's trials are (`kind` 'level').
-- The streams' mean context over their decode is their prompt plus half the output they
-- generated (a search's short trials at their own length, not the full length they stand in
-- for: their rate is their steady rate at that context; its sustain waves at theirs), per
-- wave. Each step gives each stream `tokens_per_step` tokens: 1, or more with a speculative
-- decoder, measured from the server's counters, else the per-chunk counts.
with level_rows as (
    select *, 'level' as kind from {{ ref('int_levels') }}
),

models as (
    select run_id, deployment, workload, any_value(model) as model
    from level_rows
    group by all
),

sustain_rows as (
    select
        s.run_id,
        s.deployment,
        m.model,
        s.workload,
        s.concurrency,
        s.median_decode_tok_s,
        {{ var('threshold_tok_s') }} as threshold_tok_s,
        s.passes_threshold,
        s.n_valid_trials,
        case when s.n_valid_trials = 0
            then 'sustain wave invalid: ' || coalesce(s.invalid_reasons, 'no reason recorded')
        end as no_valid_trial_reason,
        s.ttft_quantile_s,
        case when s.workload = 'agent' then {{ var('ttft_ceiling_s') }} end as ttft_ceiling_s,
        'sustain' as kind
    from {{ ref('int_search_levels') }} as s
    left join models as m
        on m.run_id = s.run_id and m.deployment = s.deployment and m.workload = s.workload
    where s.kind = 'sustain'
),

both_kinds as (
    select
        run_id, deployment, model, workload, concurrency, median_decode_tok_s,
        threshold_tok_s, passes_threshold, n_valid_trials, no_valid_trial_reason,
        ttft_quantile_s, ttft_ceiling_s, kind
    from level_rows
    union all
    select
        run_id, deployment, model, workload, concurrency, median_decode_tok_s,
        threshold_tok_s, passes_threshold, n_valid_trials, no_valid_trial_reason,
        ttft_quantile_s, ttft_ceiling_s, kind
    from sustain_rows
),

levels as (
    -- one row per level: a sustain wave where one ran (full length decides), else the trials
    select *
    from both_kinds
    qualify row_number() over (
        partition by run_id, deployment, workload, concurrency
        order by kind = 'sustain' desc
    ) = 1
),

trials as (
    -- the counted waves of the kind that decides each level
    select t.*
    from {{ ref('int_trials') }} as t
    inner join levels as l
        on l.run_id = t.run_id and l.deployment = t.deployment and l.workload = t.workload
        and l.concurrency = t.concurrency
        and l.kind = case when t.probe = 'sustain' then 'sustain' else 'level' end
    where (t.probe is null or t.probe = 'sustain') and t.trial > 0
        and not coalesce(t.is_superseded, false)
),

streams as (
    select r.*
    from {{ ref('int_stream_rates') }} as r
    inner join trials as t on t.wave_id = r.wave_id
    where r.status = 'ok'
),

evidence as (
    select e.*
    from {{ ref('int_wave_server_evidence') }} as e
    inner join trials as t on t.wave_id = e.wave_id
),

chunk_steps as (
    -- tokens per chunk after the first, where the server counted each chunk: a speculative
    -- decoder's step sends 1 + accepted drafts at once
    select s.run_id, s.deployment, s.workload, s.concurrency, avg(c.n_tokens) as tokens_per_chunk
    from {{ ref('stg_chunks') }} as c
    inner join streams as s on s.request_id = c.request_id
    where c.n_tokens is not null and c.n_tokens > 0 and c.seq > 0  -- seq 0: the first chunk
    group by all
),

context as (
    select
        run_id, deployment, workload, concurrency,
        -- what the streams generated (asked, where no usage came back), not the full length a
        -- short trial stands in for
        avg(prompt_tokens + coalesce(completion_tokens, requested_tokens) / 2.0)
            as mean_context_tokens,
        count(*) filter (where prompt_tokens is null) as n_without_prompt_count
    from streams
    group by all
),

server as (
    select
        run_id, deployment, workload, concurrency,
        any_value(engine) as engine,
        any_value(engine_source) as engine_source,
        max(value) filter (where evidence = 'requests_waiting') as peak_waiting_requests,
        max(value) filter (where evidence = 'requests_running') as peak_running_requests,
        max(value) filter (where evidence = 'kv_cache_usage') as peak_kv_cache_usage,
        sum(value) filter (where evidence = 'preemptions') as preemptions,
        sum(value) filter (where evidence = 'generation_tokens') as server_generated_tokens,
        sum(value) filter (where evidence = 'draft_tokens') as server_draft_tokens,
        sum(value) filter (where evidence = 'accepted_tokens') as server_accepted_tokens,
        avg(mean_during) filter (where evidence = 'accept_length') as server_accept_length,
        sum(value) filter (where evidence = 'queue_time_s_sum')
            / nullif(sum(value) filter (where evidence = 'queue_time_count'), 0)
            as mean_queue_time_s,
        -- in a stated order: without one, the same night's text came out in another order on
        -- a rebuild (seen comparing two builds of one warehouse)
        string_agg(
            distinct evidence || ' (' || unavailable_reason || ')', '; '
            order by evidence || ' (' || unavailable_reason || ')'
        ) filter (where status = 'unavailable') as unavailable_evidence
    from evidence
    group by all
),

client as (
    select
        run_id, deployment, workload, concurrency,
        bool_or(client_saturated) as any_client_saturated,
        bool_or(queued) as any_queued_trial,
        count(*) as n_counted_trials,
        string_agg(distinct invalid_reasons, '; ') as invalid_reasons
    from trials
    group by all
),

prefill_phase as (
    -- how much of the streams' decode ran while other streams were still waiting for their
    -- first token: the wave's TTFT spread over its median decode span. Synchronized streams
    -- all ask at once, so a spread is prefill (or a queue, which the slot signals tell apart)
    select
        run_id, deployment, workload, concurrency,
        median((max_ttft_s - min_ttft_s) / nullif(median_decode_span_s, 0)) as prefill_phase_share
    from trials
    -- an agent wave's turns are not released together: their TTFT spread is think time
    where max_ttft_s is not null and median_decode_span_s > 0 and workload <> 'agent'
    group by all
),

first_turns as (
    -- agent sessions: the first turns carry the uncached system prompt and repository
    -- context, so their TTFT is the prefill's (the later turns find their prefix cached)
    select
        t.run_id, t.deployment, 'agent' as workload, t.concurrency,
        {{ ttft_quantile('t.ttft_s') }} as first_turn_ttft_quantile_s,
        median(t.ttft_s) as first_turn_median_ttft_s,
        cast(count(t.ttft_s) as integer) as n_first_turns
    from {{ ref('int_session_turns') }} as t
    inner join trials as w on w.wave_id = t.wave_id
    where t.turn_index = 0
    group by all
),

final as (
    select
        l.run_id,
        l.deployment,
        l.model,
        l.workload,
        l.concurrency,
        l.kind,
        l.median_decode_tok_s,
        l.threshold_tok_s,
        l.passes_threshold,
        l.n_valid_trials,
        l.no_valid_trial_reason,
        s.engine,
        s.engine_source,
        x.mean_context_tokens,
        x.n_without_prompt_count,
        s.peak_waiting_requests,
        s.peak_running_requests,
        s.peak_kv_cache_usage,
        s.preemptions,
        s.server_generated_tokens,
        s.server_draft_tokens,
        s.server_accepted_tokens,
        s.server_accept_length,
        s.mean_queue_time_s,
        s.unavailable_evidence,
        c.any_client_saturated,
        c.any_queued_trial,
        c.n_counted_trials,
        c.invalid_reasons,
        g.prefill_phase_share,
        ft.first_turn_ttft_quantile_s,
        ft.first_turn_median_ttft_s,
        ft.n_first_turns,
        l.ttft_quantile_s,
        l.ttft_ceiling_s,
        k.tokens_per_chunk,
        case
            when s.server_generated_tokens > s.server_accepted_tokens
                and s.server_accepted_tokens >= 0
                then s.server_generated_tokens
                    / (s.server_generated_tokens - s.server_accepted_tokens)
            when s.server_accept_length >= 1 then s.server_accept_length
            when k.tokens_per_chunk >= 1 then k.tokens_per_chunk
            else 1.0
        end as tokens_per_step,
        case
            when s.server_generated_tokens > s.server_accepted_tokens
                and s.server_accepted_tokens >= 0 then 'server counters'
            when s.server_accept_length >= 1 then 'server accept length'
            when k.tokens_per_chunk >= 1 then 'per-chunk counts'
            else 'assumed 1 (no speculative evidence)'
        end as tokens_per_step_source
    from levels as l
    left join context as x using (run_id, deployment, workload, concurrency)
    left join server as s using (run_id, deployment, workload, concurrency)
    left join client as c using (run_id, deployment, workload, concurrency)
    left join prefill_phase as g using (run_id, deployment, workload, concurrency)
    left join first_turns as ft using (run_id, deployment, workload, concurrency)
    left join chunk_steps as k using (run_id, deployment, workload, concurrency)
)

select * from final
