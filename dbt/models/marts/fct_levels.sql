with levels as (
    select * from {{ ref('int_levels') }}
),

boot as (
    -- the interval's bounds as the search picks them (macros/level_bootstrap.sql), at the
    -- ci_low_pct / ci_high_pct of a 90 % interval
    select
        run_id, deployment, workload, concurrency,
        {{ bootstrap_interval(
            'boot_median_tok_s', var('ci_low_pct'), var('ci_high_pct')
        ) }}
    from {{ ref('int_level_bootstrap') }}
    group by run_id, deployment, workload, concurrency
),

final as (
    select
        l.run_id,
        l.deployment,
        l.model,
        l.workload,
        l.concurrency,
        l.n_trials,
        l.n_valid_trials,
        l.n_failed_streams,
        l.median_decode_tok_s,
        l.min_decode_tok_s,
        l.max_decode_tok_s,
        l.aggregate_tok_s,
        l.concurrency_x_median_tok_s,
        l.median_ttft_s,
        -- agent levels: the turn TTFT their rule holds to the ceiling (NULL for streams)
        case when l.ttft_ceiling_s is not null then cast({{ var('ttft_quantile') }} as double) end
            as ttft_quantile,
        case when l.ttft_ceiling_s is not null then l.ttft_quantile_s end as ttft_quantile_s,
        -- the samples behind it and the fewest that support it: a report prints "not
        -- enough samples" below that, never the figure (the level rule still reads it)
        case when l.ttft_ceiling_s is not null then l.n_ttft_samples end as ttft_quantile_samples,
        case when l.ttft_ceiling_s is not null
            then {{ tail_min_samples(var('ttft_quantile')) }} end as ttft_quantile_min_samples,
        case when l.ttft_ceiling_s is not null
            then l.n_ttft_samples >= {{ tail_min_samples(var('ttft_quantile')) }}
        end as ttft_quantile_is_supported,
        cast(l.ttft_ceiling_s as double) as ttft_ceiling_s,
        case when l.ttft_ceiling_s is not null and l.ttft_quantile_s is not null
            then {{ within_session_ttft_ceiling('l.ttft_quantile_s') }}
        end as meets_ttft_ceiling,
        l.effective_concurrency,
        b.ci_low_tok_s,
        b.ci_high_tok_s,
        l.any_queued,
        l.threshold_tok_s,
        l.passes_threshold
    from levels as l
    left join boot as b
        on b.run_id = l.run_id and b.deployment = l.deployment
        and b.workload = l.workload and b.concurrency = l.concurrency
)

select * from final
