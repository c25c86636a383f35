{{ config(materialized='incremental', unique_key='run_id', incremental_strategy='delete+insert') }}
-- depends_on: {{ ref('int_run_watermarks') }}

-- The TTFT a capacity tier's ceiling judges a level by: the 90th percentile (quantile_cont,
-- interpolated between the two nearest streams) of the time to first token over every ok
-- stream of the level's valid counted trials, pooled. Counted as int_levels counts (sweep
-- waves, warm-ups and superseded waves left out) and, for a search, its sustain waves as
-- int_search_levels counts them (kind 'sustain'), so each verdict a tier re-judges has its TTFT.
with trials as (
    select
        *,
        case when probe = 'sustain' then 'sustain' else 'level' end as kind
    from {{ ref('int_trials') }}
    where (probe is null or (probe = 'sustain' and method = 'search'))
        and trial > 0 and not coalesce(is_superseded, false) and is_valid
        and {{ changed_runs_filter('run_id') }}
),

streams as (
    select * from {{ ref('int_stream_rates') }}
    where status = 'ok' and ttft_s is not null
)

select
    t.run_id,
    t.deployment,
    t.workload,
    t.kind,
    t.concurrency,
    cast(count(*) as integer) as n_ttft_streams,
    quantile_cont(s.ttft_s, 0.9) as ttft_p90_s,
    median(s.ttft_s) as ttft_median_s,
    max(s.ttft_s) as ttft_max_s,
    max(t.run_watermark) as run_watermark,
    {{ judgement_settings() }} as judgement_settings
from trials as t
inner join streams as s on s.wave_id = t.wave_id
group by t.run_id, t.deployment, t.workload, t.kind, t.concurrency
