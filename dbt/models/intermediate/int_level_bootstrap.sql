{{ config(materialized='incremental', unique_key='run_id', incremental_strategy='delete+insert') }}
-- depends_on: {{ ref('int_run_watermarks') }}

-- Seeded bootstrap of the level median: resample valid trials with replacement, then each
-- picked trial's streams with replacement, take the median of medians. The pseudo-random picks
-- are hashes of (seed, level, sample, slot), so a rebuild gives identical intervals.
with streams as (
    select r.*
    from {{ ref('int_stream_rates') }} as r
    inner join {{ ref('int_trials') }} as t on t.wave_id = r.wave_id
    where t.probe is null and t.is_valid and t.trial > 0 and r.decode_tok_s is not null
        and {{ changed_runs_filter('r.run_id') }}
),

indexed as (
    select
        run_id, deployment, workload, concurrency, trial, decode_tok_s, run_watermark,
        row_number() over (
            partition by run_id, deployment, workload, concurrency, trial order by request_id
        ) - 1 as stream_slot,
        count(*) over (partition by run_id, deployment, workload, concurrency, trial)
            as n_streams
    from streams
),

trials as (
    select distinct
        run_id, deployment, workload, concurrency, trial, n_streams,
        dense_rank() over (
            partition by run_id, deployment, workload, concurrency order by trial
        ) - 1 as trial_slot
    from indexed
),

level_sizes as (
    select run_id, deployment, workload, concurrency, count(*) as n_trials
    from trials
    group by all
),

samples as (
    select unnest(range({{ var('bootstrap_samples') }})) as sample
),

trial_picks as (
    select
        l.run_id, l.deployment, l.workload, l.concurrency, s.sample, k.pick,
        hash({{ var('bootstrap_seed') }}, l.run_id, l.deployment, l.workload, l.concurrency,
             s.sample, k.pick) % l.n_trials as trial_slot
    from level_sizes as l
    cross join samples as s
    cross join lateral (select unnest(range(l.n_trials)) as pick) as k
),

stream_picks as (
    select
        p.run_id, p.deployment, p.workload, p.concurrency, p.sample, p.pick, t.trial,
        hash({{ var('bootstrap_seed') }}, p.run_id, p.deployment, p.workload, p.concurrency,
             p.sample, p.pick, j.slot, 'stream') % t.n_streams as stream_slot
    from trial_picks as p
    inner join trials as t
        on t.run_id = p.run_id and t.deployment = p.deployment and t.workload = p.workload
        and t.concurrency = p.concurrency and t.trial_slot = p.trial_slot
    cross join lateral (select unnest(range(t.n_streams)) as slot) as j
),

trial_medians as (
    select
        sp.run_id, sp.deployment, sp.workload, sp.concurrency, sp.sample, sp.pick,
        median(i.decode_tok_s) as trial_median
    from stream_picks as sp
    inner join indexed as i
        on i.run_id = sp.run_id and i.deployment = sp.deployment and i.workload = sp.workload
        and i.concurrency = sp.concurrency and i.trial = sp.trial
        and i.stream_slot = sp.stream_slot
    group by all
),

watermarks as (
    select * from {{ ref('int_run_watermarks') }}
),

final as (
    select
        t.run_id, t.deployment, t.workload, t.concurrency, t.sample,
        median(t.trial_median) as boot_median_tok_s,
        any_value(w.run_watermark) as run_watermark,
        {{ judgement_settings() }} as judgement_settings
    from trial_medians as t
    inner join watermarks as w on w.run_id = t.run_id
    group by t.run_id, t.deployment, t.workload, t.concurrency, t.sample
)

select * from final
