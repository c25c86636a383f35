-- Energy per run, deployment, workload and level: the level's counted sweep waves (trials,
-- not warm-ups, probes or superseded attempts) whose energy was measured (int_wave_energy),
-- summed. Tokens and joules come from the same waves, so tokens per joule never mixes a
-- wave's tokens with another's energy. A level none of whose waves could be measured is
-- 'unavailable' with the first wave's reason and NULL figures, never 0. A measured wave's
-- readings hold its streams' lives (int_wave_energy): its energy is the streams' and the
-- draw around them, which streams_span_s against span_s states; tokens per joule is read over
-- the streams' span (the window's mean draw times the streams' time), so a power source slow
-- to answer, whose window reaches past the streams, does not lower it (the whole window's is
-- tokens_per_joule_low). Only deployments
-- that name a power source have rows.
with waves as (
    select *
    from {{ ref('int_wave_energy') }}
    where trial >= 1 and probe is null and superseded_reason is null
),

levels as (
    select
        run_id,
        deployment,
        workload,
        concurrency,
        count(*) as n_waves,
        count(*) filter (where status = 'measured') as n_measured_waves,
        sum(energy_j) filter (where status = 'measured') as measured_energy_j,
        sum(span_s) filter (where status = 'measured') as measured_span_s,
        sum(streams_span_s) filter (where status = 'measured') as measured_streams_span_s,
        -- the streams' share of each wave's energy: its mean draw over the readings' window
        -- times the streams' own span (a power source that is slow to answer widens the window,
        -- never the streams' energy); NULL when a measured wave lacks its streams' span
        case
            when count(*) filter (where status = 'measured' and streams_span_s is null) = 0
                then sum(energy_j / nullif(span_s, 0) * streams_span_s)
                    filter (where status = 'measured')
        end as measured_streams_energy_j,
        -- NULL when a measured wave's read round trips were not kept
        case
            when count(*) filter (where status = 'measured' and span_uncertainty_s is null) = 0
                then sum(span_uncertainty_s) filter (where status = 'measured')
        end as measured_span_uncertainty_s,
        -- NULL when a measured wave's ok streams lack token counts
        case
            when count(*) filter (where status = 'measured' and generated_tokens is null) = 0
                then sum(generated_tokens) filter (where status = 'measured')
        end as measured_tokens,
        arg_min(unavailable_reason, trial) filter (where status = 'unavailable')
            as first_reason
    from waves
    group by all
),

final as (
    select
        run_id,
        deployment,
        workload,
        concurrency,
        case when n_measured_waves > 0 then measured_energy_j end as energy_j,
        case when n_measured_waves > 0 then measured_energy_j / measured_span_s end
            as mean_power_w,
        -- what the readings' stamps allow: their windows longer or shorter by the reads'
        -- round trips (int_wave_energy.span_uncertainty_s); NULL where unknown or unbounded
        case when n_measured_waves > 0
            then measured_energy_j / (measured_span_s + measured_span_uncertainty_s) end
            as mean_power_low_w,
        case when n_measured_waves > 0 and measured_span_s > measured_span_uncertainty_s
            then measured_energy_j / (measured_span_s - measured_span_uncertainty_s) end
            as mean_power_high_w,
        case when n_measured_waves > 0 then measured_span_s end as span_s,
        -- the streams' lives inside those windows: the rest is the draw around them, charged
        -- to the level's tokens (so tokens_per_joule is the wave's, not the streams' alone)
        case when n_measured_waves > 0 then measured_streams_span_s end as streams_span_s,
        case when n_measured_waves > 0 then measured_span_uncertainty_s end
            as span_uncertainty_s,
        case when n_measured_waves > 0 then measured_tokens end as generated_tokens,
        case when n_measured_waves > 0 then measured_streams_energy_j end as streams_energy_j,
        -- tokens per joule of the streams' own span: the figure (a window that only held the
        -- streams gives the same); charged the whole window, the draw around the streams too,
        -- it is tokens_per_joule_low, what a slow power source's window pulls it down to
        case when n_measured_waves > 0
            then measured_tokens / nullif(measured_streams_energy_j, 0) end as tokens_per_joule,
        case when n_measured_waves > 0 then measured_tokens / nullif(measured_energy_j, 0) end
            as tokens_per_joule_low,
        case when n_measured_waves > 0 then 'measured' else 'unavailable' end as status,
        case when n_measured_waves = 0 then first_reason end as unavailable_reason,
        n_waves,
        n_measured_waves
    from levels
)

select * from final
