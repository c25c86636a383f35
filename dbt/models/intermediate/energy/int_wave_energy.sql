-- Energy per wave from its power readings (loadgen/power.py), per sensor and summed over
-- sensors: a sensor's energy counter's rise where it gave two readings of one (DCGM's total
-- energy, RAPL), else the trapezoid integral of its power draw. Each sensor is counted once,
-- by its own best reading: a power-only sensor beside one with a counter is counted too (a
-- GPU without the counter, an hwmon GPU beside RAPL). The window is the readings' own: from
-- the round just before the streams were released to the one after the last ended. A wave
-- is unavailable, with the reason, when no sensor gave two readings, when any sensor gave
-- fewer than two (a partial sum would understate), when a counter went backwards (a reset)
-- or did not move at all (an exporter that refreshes slower than the wave, DCGM's 30 s
-- default: never "0 J"), or when a sensor's mean draw is past var('energy_max_sensor_w')
-- (a counter jump in a short wave): never 0 J, never an impossible wattage.
-- The window must hold the streams' lives, from the first request sent to the last stream's
-- end: where a sensor's first reading came after the release (the round before it failed)
-- or its last before the end, part of the wave's energy is missing while all its tokens are
-- counted, so the wave is unavailable with by how much, never a tokens-per-joule too high.
-- Where it holds them, streams_span_s says how much of the window the streams filled (the
-- rest is the draw around them, charged to the wave's tokens).
-- A reading is stamped at the middle of the read that fetched it and the source read its
-- sensor somewhere inside that read, so a counter's window is known to within half the first
-- and last reads' round trips either way: span_uncertainty_s, and the mean power's range.
-- (A trapezoid's draws move with their stamps: its mean power does not depend on them.)
with samples as (
    select * from {{ ref('stg_power_samples') }}
),

waves as (
    select wave_id, run_id, deployment, workload, concurrency, trial, probe, superseded_reason
    from {{ ref('stg_waves') }}
),

requests as (
    select
        wave_id,
        min(sent_ns) as streams_start_ns,
        max(coalesce(end_ns, last_token_ns)) as streams_end_ns,
        count(*) filter (where status = 'ok') as n_ok_streams,
        sum(completion_tokens) filter (where status = 'ok') as ok_tokens,
        count(*) filter (where status = 'ok' and completion_tokens is null) as n_ok_uncounted
    from {{ ref('stg_requests') }}
    group by wave_id
),

-- the first reason a wave's source gave, in the order it was read
first_problem as (
    select wave_id, arg_min(reason, seq) as first_reason
    from samples
    where status = 'unavailable'
    group by wave_id
),

ok as (
    select * from samples where status = 'ok' and reading_value is not null
),

-- each sensor by its counter where it gave two readings of one, else by its power draw
sensor_method as (
    select wave_id, sensor, count(*) filter (where quantity = 'energy_j') >= 2 as by_counter
    from ok
    group by all
),

chosen as (
    select
        o.*,
        m.by_counter,
        lag(o.t_ns) over sensor_series as prev_t_ns,
        lag(o.reading_value) over sensor_series as prev_value
    from ok as o
    inner join sensor_method as m on m.wave_id = o.wave_id and m.sensor is not distinct from o.sensor
    where o.quantity = case when m.by_counter then 'energy_j' else 'power_w' end
    window sensor_series as (partition by o.wave_id, o.sensor order by o.t_ns, o.seq)
),

per_sensor as (
    select
        wave_id,
        sensor,
        any_value(by_counter) as by_counter,
        count(*) as n_readings,
        min(t_ns) as first_t_ns,
        max(t_ns) as last_t_ns,
        (max(t_ns) - min(t_ns)) / 1e9 as span_s,
        case
            when any_value(by_counter)
                then (arg_min(read_rtt_s, t_ns) + arg_max(read_rtt_s, t_ns)) / 2
            else 0.0
        end as span_uncertainty_s,
        -- NULL: a read's round trip was not kept (a warehouse from before it was)
        bool_or(read_rtt_s is null) as rtt_unknown,
        bool_or(by_counter and reading_value < prev_value) as went_backwards,
        case
            when any_value(by_counter) then arg_max(reading_value, t_ns) - arg_min(reading_value, t_ns)
            else sum((t_ns - prev_t_ns) / 1e9 * (reading_value + prev_value) / 2)
                filter (where prev_t_ns is not null)
        end as sensor_energy_j
    from chosen
    group by wave_id, sensor
),

per_sensor_judged as (
    select
        *,
        by_counter and sensor_energy_j = 0 as did_not_move,
        sensor_energy_j / nullif(span_s, 0) as sensor_mean_w
    from per_sensor
),

per_wave as (
    select
        wave_id,
        case
            when bool_and(by_counter) then 'counter'
            when bool_or(by_counter) then 'counter and trapezoid'
            else 'trapezoid'
        end as energy_method,
        count(*) as n_sensors,
        max(span_s) as span_s,
        case when not bool_or(rtt_unknown) then max(span_uncertainty_s) end
            as span_uncertainty_s,
        sum(sensor_energy_j) as summed_energy_j,
        min(n_readings) as fewest_readings,
        arg_min(sensor, n_readings) as sparsest_sensor,
        bool_or(went_backwards) as went_backwards,
        min(sensor) filter (where went_backwards) as reset_sensor,
        min(sensor) filter (where did_not_move and not went_backwards) as stuck_sensor,
        max(sensor_mean_w) as highest_sensor_w,
        arg_max(sensor, sensor_mean_w) as highest_sensor,
        -- the window every sensor covers: its latest first reading, its earliest last
        max(first_t_ns) as covered_from_ns,
        arg_max(sensor, first_t_ns) as latest_starting_sensor,
        min(last_t_ns) as covered_to_ns,
        arg_min(sensor, last_t_ns) as earliest_ending_sensor
    from per_sensor_judged
    group by wave_id
),

sampled_waves as (
    select distinct wave_id, power_source from samples
),

judged as (
    select
        w.wave_id,
        w.run_id,
        w.deployment,
        w.workload,
        w.concurrency,
        w.trial,
        w.probe,
        w.superseded_reason,
        s.power_source,
        p.energy_method,
        p.n_sensors,
        p.span_s,
        p.span_uncertainty_s,
        case
            when p.wave_id is null
                then coalesce(f.first_reason, 'no power reading during the wave')
            when p.went_backwards
                then 'the energy counter of ' || p.reset_sensor || ' went backwards (a reset)'
            when p.fewest_readings < 2
                then 'only one reading of ' || coalesce(p.sparsest_sensor, 'the sensor')
                    || coalesce(' (' || f.first_reason || ')', '')
            when p.span_s <= 0 then 'every reading at one instant'
            when r.streams_start_ns < p.covered_from_ns
                then 'the readings of ' || p.latest_starting_sensor || ' began '
                    || printf('%.2f', (p.covered_from_ns - r.streams_start_ns) / 1e9)
                    || ' s after the first request was sent: part of the wave''s energy unread'
            when r.streams_end_ns > p.covered_to_ns
                then 'the readings of ' || p.earliest_ending_sensor || ' ended '
                    || printf('%.2f', (r.streams_end_ns - p.covered_to_ns) / 1e9)
                    || ' s before the last stream did: part of the wave''s energy unread'
            when p.stuck_sensor is not null
                then 'the energy counter of ' || p.stuck_sensor || ' did not move during the '
                    || printf('%.1f', p.span_s) || ' s wave (an exporter that refreshes '
                    || 'slower than the wave?)'
            when p.highest_sensor_w > {{ var('energy_max_sensor_w') | float }}
                then p.highest_sensor || ' read a mean ' || printf('%.3g', p.highest_sensor_w)
                    || ' W, past the ' || printf('%g', {{ var('energy_max_sensor_w') | float }})
                    || ' W one sensor can draw (a counter jump?)'
        end as unavailable_reason,
        p.summed_energy_j,
        (r.streams_end_ns - r.streams_start_ns) / 1e9 as streams_span_s,
        r.n_ok_streams,
        case when coalesce(r.n_ok_uncounted, 0) = 0 then coalesce(r.ok_tokens, 0) end
            as generated_tokens
    from sampled_waves as s
    inner join waves as w on w.wave_id = s.wave_id
    left join per_wave as p on p.wave_id = s.wave_id
    left join first_problem as f on f.wave_id = s.wave_id
    left join requests as r on r.wave_id = s.wave_id
),

final as (
    select
        wave_id,
        run_id,
        deployment,
        workload,
        concurrency,
        trial,
        probe,
        superseded_reason,
        power_source,
        energy_method,
        n_sensors,
        span_s,
        span_uncertainty_s,
        streams_span_s,
        case when unavailable_reason is null then 'measured' else 'unavailable' end as status,
        unavailable_reason,
        case when unavailable_reason is null then summed_energy_j end as energy_j,
        case when unavailable_reason is null then summed_energy_j / span_s end as mean_power_w,
        case when unavailable_reason is null
            then summed_energy_j / (span_s + span_uncertainty_s) end as mean_power_low_w,
        case when unavailable_reason is null and span_s > span_uncertainty_s
            then summed_energy_j / (span_s - span_uncertainty_s) end as mean_power_high_w,
        n_ok_streams,
        generated_tokens
    from judged
)

select * from final
