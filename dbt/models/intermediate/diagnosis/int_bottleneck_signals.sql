-- The evidence behind each capacity's verdict: one row per run, deployment, workload and
-- signal, read at the level that stopped the capacity (its first failing level, or the first
-- level without a valid measurement, whichever is lower; the top level when every level
-- passed). Each signal names the factor it points to, what was observed, where it came from,
-- and whether it `supports` that factor, speaks `against` it, is `neutral` (read, but deciding
-- neither way: a bound above the threshold does not say the memory is not the limit), or is
-- `unavailable` (the server publishes no such metric, no scrape reached, a fact is missing):
-- an unavailable signal is never read as a 0. Each signal's `evidence_kind` says what it
-- rests on: `measured` (the server's gauges and counters, the client's observations, the
-- bound against the measured rate) or `configured` (a declared or reported setting, such as
-- the slot count), which fct_bottlenecks weighs below any measurement.
with capacity as (
    select * from {{ ref('fct_capacity') }}
),

diag as (
    select * from {{ ref('int_level_diagnosis') }}
),

links as (
    select
        run_id, deployment,
        bool_or(not healthy) as any_unhealthy,
        string_agg(link || ' ' || coalesce(round(100 * share_of_nominal)::varchar || ' %', 'failed')
            || ' of nominal', '; ') filter (where not healthy) as unhealthy_links,
        count(*) as n_links
    from {{ ref('fct_link_health') }}
    group by all
),

points as (
    select
        c.run_id,
        c.deployment,
        c.workload,
        c.capacity_streams,
        c.is_non_monotonic,
        c.threshold_tok_s,
        case
            when c.first_failing_level is not null and c.unmeasured_level is not null
                then least(c.first_failing_level, c.unmeasured_level)
            else coalesce(c.first_failing_level, c.unmeasured_level, c.top_level)
        end as limit_level
    from capacity as c
),

at_limit as (
    select p.*, d.* exclude (run_id, deployment, workload, threshold_tok_s)
    from points as p
    left join diag as d
        on d.run_id = p.run_id and d.deployment = p.deployment
        and d.workload = p.workload and d.concurrency = p.limit_level
),

signals as (
    select run_id, deployment, workload, limit_level, 'client' as factor,
        'client saturated' as signal, 1 as factor_rank,
        case when any_client_saturated then 1.0 else 0.0 end as observed,
        case when any_client_saturated then 'the client could not keep the wave''s timing: '
            || coalesce(invalid_reasons, '') else 'client timing held' end as detail,
        'int_trials.client_saturated' as source,
        case when any_client_saturated is null then 'unavailable'
             when any_client_saturated then 'supports' else 'against' end as status
    from at_limit
    union all
    select a.run_id, a.deployment, a.workload, a.limit_level, 'link', 'unhealthy link', 2,
        case when l.any_unhealthy then 1.0 else 0.0 end,
        case when l.n_links is null then 'no link checked this night'
             when l.any_unhealthy then 'unhealthy: ' || l.unhealthy_links
             else l.n_links || ' link(s) healthy' end,
        'fct_link_health',
        case when l.n_links is null then 'unavailable'
             when l.any_unhealthy then 'supports' else 'against' end
    from at_limit as a
    left join links as l on l.run_id = a.run_id and l.deployment = a.deployment
    union all
    select run_id, deployment, workload, limit_level, 'kv-cache', 'preemptions', 3,
        preemptions,
        case when preemptions is null then 'no preemption counter'
             else printf('%.0f', preemptions) || ' preemption(s) during the level''s waves' end,
        'server /metrics: preemptions',
        case when preemptions is null then 'unavailable'
             when preemptions > 0 then 'supports' else 'against' end
    from at_limit
    union all
    select run_id, deployment, workload, limit_level, 'kv-cache', 'KV-cache use', 3,
        peak_kv_cache_usage,
        case when peak_kv_cache_usage is null then 'no KV-cache gauge sampled during the waves'
             else 'KV cache peaked at ' || round(100 * peak_kv_cache_usage, 1) || ' %' end,
        'server /metrics: kv_cache_usage (peak during)',
        case when peak_kv_cache_usage is null then 'unavailable'
             when peak_kv_cache_usage >= {{ var('kv_full_usage') }} then 'supports'
             else 'against' end
    from at_limit
    union all
    select run_id, deployment, workload, limit_level, 'request-slots', 'server queue', 4,
        peak_waiting_requests,
        case when peak_waiting_requests is null then 'no waiting-requests gauge sampled'
             else 'up to ' || printf('%.0f', peak_waiting_requests) || ' request(s) waiting' end,
        'server /metrics: requests_waiting (peak during)',
        case when peak_waiting_requests is null then 'unavailable'
             when peak_waiting_requests > 0 then 'supports' else 'against' end
    from at_limit
    union all
    select run_id, deployment, workload, limit_level, 'request-slots', 'queued streams', 4,
        case when any_queued_trial then 1.0 else 0.0 end,
        case
            when any_queued_trial and peak_waiting_requests = 0
                and peak_running_requests >= limit_level
                then 'first tokens spread as if queued, but the server ran all '
                    || limit_level || ' and held none waiting: not a slot queue'
            when any_queued_trial then 'streams waited for a slot: ' || coalesce(invalid_reasons, '')
            else 'no stream waited for a slot (TTFT and overlap)' end,
        'int_trials.queued',
        case when any_queued_trial is null then 'unavailable'
             -- the server's own gauges outrank the client's inference from first-token times
             when any_queued_trial and peak_waiting_requests = 0
                 and peak_running_requests >= limit_level then 'against'
             when any_queued_trial then 'supports' else 'against' end
    from at_limit
    union all
    select run_id, deployment, workload, limit_level, 'request-slots', 'slots', 4,
        coalesce(server_slots, parallel_slots),
        case when coalesce(server_slots, parallel_slots) is null then 'slot count not known'
             else coalesce(server_slots, parallel_slots) || ' slot(s) for '
                 || limit_level || ' streams' end,
        case when server_slots is not null then 'server facts: server_slots'
             else 'fleet file: parallel_slots' end,
        case when coalesce(server_slots, parallel_slots) is null then 'unavailable'
             when limit_level > coalesce(server_slots, parallel_slots) then 'supports'
             else 'against' end
    from at_limit
    union all
    select run_id, deployment, workload, limit_level, 'batch-buckets', 'not monotone', 5,
        case when is_non_monotonic then 1.0 else 0.0 end,
        case when is_non_monotonic
            then 'a level above ' || capacity_streams || ' passes again: a padded batch size'
            else 'the level curve is monotone' end,
        'fct_capacity.is_non_monotonic',
        case when is_non_monotonic is null then 'unavailable'
             when is_non_monotonic then 'supports' else 'against' end
    from at_limit
    union all
    select run_id, deployment, workload, limit_level, 'prefill', 'prefill phase', 6,
        prefill_phase_share,
        case when prefill_phase_share is null then 'no TTFT spread to compare'
             else 'streams decoded ' || round(100 * prefill_phase_share)::integer || ' % of their span '
                 || 'while others were still in prefill' end,
        'int_trials: (max_ttft_s - min_ttft_s) / median_decode_span_s (median)',
        case when prefill_phase_share is null then 'unavailable'
             when prefill_phase_share >= {{ var('prefill_phase_share') }} then 'supports'
             else 'against' end
    from at_limit
    where workload <> 'agent'
    union all
    -- agent sessions: is it the cold first turns' prefill that breaks the TTFT ceiling?
    select run_id, deployment, workload, limit_level, 'prefill', 'cold first turns', 6,
        first_turn_ttft_quantile_s,
        case when first_turn_ttft_quantile_s is null then 'no first turn started'
             -- a quantile over too few turns is no figure (macro tail_min_samples): the
             -- median, which few samples do support, and the count instead
             when coalesce(n_first_turns, 0) < {{ tail_min_samples(var('ttft_quantile')) }}
             then 'first turns (uncached system prompt and repository) started in '
                 || round(first_turn_median_ttft_s, 2) || ' s at the median of '
                 || coalesce(n_first_turns, 0) || ' (not enough samples for the TTFT quantile: '
                 || {{ tail_min_samples(var('ttft_quantile')) }} || ' needed), '
                 || 'the ceiling is ' || ttft_ceiling_s || ' s'
             else 'first turns (uncached system prompt and repository) started in '
                 || round(first_turn_ttft_quantile_s, 2) || ' s at the TTFT quantile, '
                 || 'the ceiling is ' || ttft_ceiling_s || ' s (all turns: '
                 || coalesce(round(ttft_quantile_s, 2)::varchar, '?') || ' s)' end,
        'int_session_turns: turn 0 TTFT at var ttft_quantile',
        case when first_turn_ttft_quantile_s is null then 'unavailable'
             when first_turn_ttft_quantile_s > ttft_ceiling_s then 'supports'
             else 'against' end
    from at_limit
    where workload = 'agent'
    union all
    select run_id, deployment, workload, limit_level, 'memory-bandwidth', 'share of the bound', 7,
        share_of_bound,
        case when share_of_bound is null then coalesce(bound_note, 'no bound')
             else round(median_decode_tok_s, 1) || ' tok/s = ' || round(100 * share_of_bound)::integer
                 || ' % of the ' || round(bound_decode_tok_s, 1)
                 || ' tok/s the memory allows at ' || limit_level || ' streams'
                 || case memory_bandwidth_basis
                     when 'nominal' then ' (at the nominal bandwidth: a decode step reads '
                         || 'below it, so the share reads low)'
                     when 'measured' then ' (at the measured read bandwidth)'
                     else '' end end,
        'int_level_diagnosis.share_of_bound',
        case when share_of_bound is null then 'unavailable'
             when share_of_bound >= {{ var('bandwidth_bound_share') }} then 'supports'
             else 'against' end
    from at_limit
    union all
    select run_id, deployment, workload, limit_level, 'memory-bandwidth', 'bound below the threshold', 7,
        bound_decode_tok_s,
        case when bound_decode_tok_s is null then coalesce(bound_note, 'no bound')
             else 'even at full bandwidth ' || limit_level || ' streams get at most '
                 || round(bound_decode_tok_s, 1) || ' tok/s each' end,
        'int_level_diagnosis.bound_decode_tok_s',
        -- a bound above the threshold only says the memory could carry the threshold at full
        -- bandwidth: how close the level came is the share's signal, so this one is neutral
        case when bound_decode_tok_s is null then 'unavailable'
             when bound_decode_tok_s < threshold_tok_s then 'supports'
             else 'neutral' end
    from at_limit
),

final as (
    select
        run_id,
        deployment,
        workload,
        limit_level,
        factor,
        factor_rank,
        signal,
        -- a slot count is what the server was set to run with (declared, a launch's -np, or
        -- the server's own /props), not what happened: configuration, never a measurement
        case when signal = 'slots' then 'configured' else 'measured' end as evidence_kind,
        observed,
        detail,
        source,
        status
    from signals
)

select * from final
