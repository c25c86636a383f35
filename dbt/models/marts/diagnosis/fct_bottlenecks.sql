-- Why each capacity is what it is: one row per run, deployment and workload. The verdict is
-- chosen by the weight of the evidence at the limiting level (int_bottleneck_signals):
--   * a factor is *confirmed* when a measured signal supports it and its measured signals
--     for it are at least as many as those against it (the server's gauges and counters, the
--     client's queue detection, the bound against the measured rate);
--   * a factor that only a configured setting supports (a slot count), with no measurement
--     against it, is at most *consistent with*: unconfirmed, low confidence;
--   * a factor whose measurements speak against it is never the verdict, whatever its
--     configuration says (the study: configured request slots alone are insufficient).
-- Among confirmed factors (and, failing those, unconfirmed ones) the fixed order decides:
-- client, link, kv-cache, request-slots, batch-buckets, prefill, memory-bandwidth, which
-- puts what invalidates or distorts a measurement before what explains a clean one.
-- "unknown" when no factor stands; "not reached" when every level passed; "not measured"
-- when no level was. Confidence: high for a confirmed factor with two or more signals for it
-- and none against, medium for any other confirmed one, low for an unconfirmed one or when
-- the limiting level had no valid trial (its evidence comes from invalid waves only).
with capacity as (
    select * from {{ ref('fct_capacity') }}
),

signals as (
    select * from {{ ref('int_bottleneck_signals') }}
),

diag as (
    select * from {{ ref('int_level_diagnosis') }}
),

weighed as (
    select
        run_id, deployment, workload, factor, factor_rank,
        count(*) filter (where status = 'supports' and evidence_kind = 'measured')
            as n_measured_for,
        count(*) filter (where status = 'against' and evidence_kind = 'measured')
            as n_measured_against,
        count(*) filter (where status = 'supports' and evidence_kind = 'configured')
            as n_configured_for,
        string_agg(detail, '; ' order by signal) filter (where status = 'supports') as evidence,
        string_agg(detail, '; ' order by signal)
            filter (where status = 'against' and evidence_kind = 'measured') as measured_against
    from signals
    group by all
),

standing as (
    select
        *,
        case
            when n_measured_for > 0 and n_measured_for >= n_measured_against then 'confirmed'
            when n_configured_for > 0 and n_measured_against = 0 then 'unconfirmed'
        end as standing
    from weighed
),

chosen as (
    select *
    from standing
    where standing is not null
    qualify row_number() over (
        partition by run_id, deployment, workload
        order by standing = 'confirmed' desc, factor_rank
    ) = 1
),

overruled as (
    -- configuration the measurements contradict: said, so a reader sees why it is not the why
    select run_id, deployment, workload,
        string_agg(factor || ': ' || evidence || ', but ' || measured_against, '; '
            order by factor_rank) as overruled_evidence
    from standing
    where n_configured_for > 0 and standing is null
    group by all
),

unavailable as (
    select run_id, deployment, workload,
        string_agg(factor || ': ' || detail, '; ' order by factor_rank, signal) as unavailable_evidence
    from signals
    where status = 'unavailable'
    group by all
),

limits as (
    select distinct run_id, deployment, workload, limit_level from signals
),

bound_curve as (
    -- the most streams the memory could carry at the threshold, at the limiting level's
    -- context and tokens per step: the physical ceiling beside the measured capacity
    select
        d.run_id, d.deployment, d.workload,
        max(c.n) filter (
            where {{ decode_bound_tok_s(
                'd.tokens_per_step', 'd.replica_bandwidth_bytes_s',
                weight_bytes_per_step(
                    'd.weight_bytes', 'd.moe_experts', 'd.moe_experts_per_token',
                    'd.moe_expert_bytes', 'd.moe_shared_bytes', 'c.n'
                ),
                'c.n', 'd.mean_context_tokens', 'd.kv_bytes_per_token'
            ) }} >= d.threshold_tok_s
        ) as bound_capacity_streams
    from diag as d
    inner join limits as l
        on l.run_id = d.run_id and l.deployment = d.deployment
        and l.workload = d.workload and l.limit_level = d.concurrency
    cross join (select unnest(range(1, 4097)) as n) as c
    where d.replica_bandwidth_bytes_s is not null and d.kv_bytes_per_token is not null
        and d.mean_context_tokens is not null
        and (d.weight_bytes is not null or d.moe_experts is not null)
    group by all
),

flags as (
    select
        run_id, deployment, workload,
        bool_or(is_above_bound) as any_level_above_bound,
        string_agg(concurrency::varchar, ', ' order by concurrency)
            filter (where is_above_bound) as levels_above_bound,
        bool_or(is_far_below_bound) filter (where concurrency = 1) as is_far_below_bound_at_1
    from diag
    group by all
),

joined as (
    select
        c.run_id,
        c.deployment,
        c.model,
        c.workload,
        c.capacity_streams,
        c.is_measured,
        c.is_lower_bound,
        c.capacity_verdict,
        l.limit_level,
        d.median_decode_tok_s as limit_level_tok_s,
        d.bound_decode_tok_s as limit_level_bound_tok_s,
        d.share_of_bound as limit_level_share_of_bound,
        d.n_valid_trials as limit_level_valid_trials,
        d.engine,
        b.bound_capacity_streams,
        f.any_level_above_bound,
        f.levels_above_bound,
        f.is_far_below_bound_at_1,
        ch.factor as supported_factor,
        ch.standing,
        ch.n_measured_for,
        ch.n_measured_against,
        ch.n_configured_for,
        ch.evidence,
        o.overruled_evidence,
        u.unavailable_evidence
    from capacity as c
    left join limits as l using (run_id, deployment, workload)
    left join chosen as ch using (run_id, deployment, workload)
    left join unavailable as u using (run_id, deployment, workload)
    left join overruled as o using (run_id, deployment, workload)
    left join bound_curve as b using (run_id, deployment, workload)
    left join flags as f using (run_id, deployment, workload)
    left join diag as d
        on d.run_id = c.run_id and d.deployment = c.deployment
        and d.workload = c.workload and d.concurrency = l.limit_level
),

final as (
    select
        run_id,
        deployment,
        model,
        workload,
        capacity_streams,
        limit_level,
        case
            when not is_measured then 'not measured'
            when is_lower_bound then 'not reached'
            else coalesce(supported_factor, 'unknown')
        end as bottleneck,
        case
            when not is_measured or is_lower_bound or supported_factor is null then null
            when standing = 'unconfirmed' then 'low'
            when coalesce(limit_level_valid_trials, 0) = 0 then 'low'
            when n_measured_for + n_configured_for >= 2 and n_measured_against = 0 then 'high'
            else 'medium'
        end as confidence,
        case
            when not is_measured or is_lower_bound or supported_factor is null then null
            else standing = 'confirmed'
        end as is_confirmed,
        case
            when not is_measured then capacity_verdict
            when is_lower_bound then 'every level up to ' || limit_level
                || ' streams passed: the limit lies above what was tried'
            when standing = 'unconfirmed' then 'consistent with ' || evidence
                || ', unconfirmed: no server gauge or client observation at ' || limit_level
                || ' streams supports it'
            else evidence
        end as evidence,
        case
            when not is_measured or is_lower_bound then null
            when standing = 'unconfirmed'
                then 'confirm it first: let sparkcap read the server''s queue and KV gauges '
                    || '(/metrics) at the limiting level'
            when supported_factor = 'client'
                then 'measure from a stronger or less loaded client host (sparkcap calibrate)'
            when supported_factor = 'link'
                then 'check the link between the replica''s nodes before trusting this capacity'
            when supported_factor = 'kv-cache'
                then 'give the KV cache more memory or shorter contexts; preempted streams stall'
            when supported_factor = 'request-slots'
                then 'raise the server''s request slots (e.g. llama-server -np, vLLM max_num_seqs)'
            when supported_factor = 'batch-buckets'
                then 'capture the batch sizes you run at (vLLM cudagraph capture sizes)'
            when supported_factor = 'prefill'
                then 'isolate long prefills (chunked prefill, a prefill pool) from decoding streams'
            when supported_factor = 'memory-bandwidth' and workload = 'prose'
                then 'at the memory''s limit: route prose where acceptance is higher, or add replicas'
            when supported_factor = 'memory-bandwidth'
                then 'at the memory''s limit: add replicas, or a faster speculative decoder'
        end as advice,
        limit_level_tok_s,
        limit_level_bound_tok_s,
        limit_level_share_of_bound,
        bound_capacity_streams,
        coalesce(any_level_above_bound, false) as any_level_above_bound,
        levels_above_bound,
        coalesce(is_far_below_bound_at_1, false) as is_far_below_bound,
        nullif(array_to_string(list_filter([
            case when any_level_above_bound then 'measured above the memory-bandwidth bound at '
                || levels_above_bound || ' stream(s): a declared fact or the measurement is wrong' end,
            case when is_far_below_bound_at_1 then 'one stream decodes below '
                || round(100 * {{ var('bound_far_below_share') }}) || ' % of the bound: eager '
                || 'mode, wrong kernels, or a speculative decoder that does not pay?' end
        ], lambda x: x is not null), '; '), '') as bound_flags,
        engine,
        unavailable_evidence,
        case when is_measured and not is_lower_bound then overruled_evidence end
            as overruled_evidence
    from joined
)

select * from final
