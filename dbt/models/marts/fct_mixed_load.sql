-- Mixed-load probe: code and prose streams in one wave, each workload's median rate beside
-- the same workload alone at the same concurrency (from the night's sweep, when it has one).
with streams as (
    select * from {{ ref('int_stream_rates') }}
    where probe = 'mixed' and trial > 0
),

wave_ok as (
    -- a mixed wave counts by the same verdict as a sweep's trial (int_trials.is_valid)
    select wave_id, is_valid
    from {{ ref('int_trials') }}
    where probe = 'mixed'
),

per_wave as (
    select
        s.run_id, s.wave_id, s.deployment, s.concurrency,
        s.request_role as stream_workload,
        count(*) as n_streams,
        median(s.decode_tok_s) as median_decode_tok_s
    from streams as s
    inner join wave_ok as v on v.wave_id = s.wave_id
    where v.is_valid
    group by all
),

levels as (
    select * from {{ ref('int_levels') }}
),

final as (
    select
        p.run_id, p.deployment, p.concurrency, p.stream_workload,
        any_value(p.n_streams) as n_streams,
        count(*) as n_valid_trials,
        median(p.median_decode_tok_s) as median_decode_tok_s,
        any_value(l.median_decode_tok_s) as alone_median_decode_tok_s
    from per_wave as p
    left join levels as l
        on l.run_id = p.run_id and l.deployment = p.deployment
        and l.workload = p.stream_workload and l.concurrency = p.concurrency
    group by p.run_id, p.deployment, p.concurrency, p.stream_workload
)

select * from final
