-- Time series behind the probe charts: background decode rate per stream in 0.5 s bins, and
-- each probe request's TTFT at its send time, with the prefill window for shading.
with req as (
    select * from {{ ref('int_probe_requests') }}
    where probe = 'prefill-interference'
),

chunks as (
    select * from {{ ref('stg_chunks') }}
),

background as (
    select r.run_id, r.wave_id, r.deployment, r.tokens_per_chunk,
           floor(c.t_ns / 1e9 / 0.5) * 0.5 as bin_s
    from req as r
    inner join chunks as c on c.request_id = r.request_id
    where r.request_role = 'background'
),

n_bg as (
    select wave_id, count(*) as n from req where request_role = 'background' group by wave_id
),

rate_bins as (
    select b.run_id, b.wave_id, b.deployment, 'background decode' as series, b.bin_s as t_s,
           sum(b.tokens_per_chunk) / 0.5 / any_value(n.n) as value
    from background as b
    inner join n_bg as n on n.wave_id = b.wave_id
    group by b.run_id, b.wave_id, b.deployment, b.bin_s
),

probe_points as (
    select run_id, wave_id, deployment, 'probe TTFT' as series, sent_s as t_s, ttft_s as value
    from req
    where request_role = 'probe'
),

windows as (
    select wave_id, sent_s as prefill_start_s, first_token_s as prefill_end_s
    from req where request_role = 'long'
),

final as (
    select u.*, w.prefill_start_s, w.prefill_end_s
    from (select * from rate_bins union all select * from probe_points) as u
    left join windows as w on w.wave_id = u.wave_id
)

select * from final
