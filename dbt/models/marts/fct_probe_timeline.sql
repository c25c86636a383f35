-- Time series behind the probe charts: the background decode rate per stream in sliding
-- windows (plotted at each window's middle), and each probe request's TTFT at its send time,
-- with the prefill window for shading.
with req as (
    select * from {{ ref('int_probe_requests') }}
    where probe = 'prefill-interference'
),

sliding as (
    select * from {{ ref('int_probe_decode_windows') }}
),

rate_points as (
    select run_id, wave_id, deployment, 'background decode' as series, window_mid_s as t_s,
           decode_tok_s as value
    from sliding
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
    from (select * from rate_points union all select * from probe_points) as u
    left join windows as w on w.wave_id = u.wave_id
)

select * from final
