-- What the server said about each wave, by meaning (int_engine_metric_names): one row per
-- wave and evidence. A gauge is read from the samples taken while the wave ran (its peak and
-- mean); a counter or histogram part as after - before. Whose names apply: the engine the
-- deployment declares or the server named (int_deployment_facts), else the engine whose names
-- the deployment's samples that night carry most. Evidence the engine publishes no name for,
-- or whose name is absent from the page, or that no scrape reached, is `unavailable` with the
-- reason, never 0. On a server hosting several models, samples labelled with the wave's model
-- are used, and unlabelled ones.
with samples as (
    select * from {{ ref('stg_server_metrics') }}
),

waves as (
    select wave_id, run_id, deployment, model, workload, concurrency, trial, metrics_error
    from {{ ref('stg_waves') }}
),

names as (
    select * from {{ ref('int_engine_metric_names') }}
),

facts as (
    select run_id, deployment, engine, engine_source from {{ ref('int_deployment_facts') }}
),

relevant as (
    -- a server's page is untrusted: NaN and infinities (which DuckDB sorts above every
    -- number, so a NaN KV gauge would read "full") are no reading
    select s.*, w.run_id, w.deployment
    from samples as s
    inner join waves as w on w.wave_id = s.wave_id
    where isfinite(s.metric_value)
        and (s.metric_labels = ''
        or coalesce(
            list_contains(map_values(s.metric_label_map), w.model),
            s.metric_labels like '%"' || w.model || '"%'
        ))
),

name_hits as (
    -- how many of each engine's names the deployment's pages carried that night
    select r.run_id, r.deployment, n.engine, count(distinct n.metric_name) as n_names
    from relevant as r
    inner join names as n on n.metric_name = r.metric_name
    group by all
),

inferred as (
    select run_id, deployment, arg_max(engine, n_names) as engine
    from name_hits
    group by all
),

wave_engine as (
    select
        w.*,
        coalesce(f.engine, i.engine) as engine,
        case
            when f.engine is not null then f.engine_source
            when i.engine is not null then 'metric names'
        end as engine_source,
        exists (select 1 from samples as s where s.wave_id = w.wave_id) as was_scraped
    from waves as w
    left join facts as f on f.run_id = w.run_id and f.deployment = w.deployment
    left join inferred as i on i.run_id = w.run_id and i.deployment = w.deployment
),

snapshot_series as (
    -- before and after are one scrape each, so a series seen twice in one of them was listed
    -- twice on the page (invalid exposition, which the parser takes): it counts once, and is
    -- no reading at all where the two values differ
    select
        wave_id, phase, metric_name, metric_labels,
        min(metric_value) as metric_value,
        min(metric_value) <> max(metric_value) as is_contradictory
    from relevant
    where phase in ('before', 'after')
    group by all
),

snapshots as (
    select
        s.wave_id,
        n.engine,
        n.evidence,
        n.metric_name,
        sum(s.metric_value) filter (where s.phase = 'after')
            - sum(s.metric_value) filter (where s.phase = 'before') as delta,
        bool_or(s.is_contradictory) as is_contradictory
    from snapshot_series as s
    inner join names as n on n.metric_name = s.metric_name
    group by all
),

samples_read as (
    select
        r.wave_id,
        n.engine,
        n.evidence,
        n.kind,
        n.metric_name,
        n.preference,
        max(r.metric_value) filter (where r.phase = 'during') as peak_during,
        avg(r.metric_value) filter (where r.phase = 'during') as mean_during,
        count(*) filter (where r.phase = 'during') as n_during,
        -- a value past 2^53 is no exact count or gauge in a double (a page read 1e20): the
        -- reading is unusable, and never reaches a cast or a sum that could overflow
        max(abs(r.metric_value)) as largest_abs_value
    from relevant as r
    inner join names as n on n.metric_name = r.metric_name
    group by all
),

readings as (
    select
        r.*,
        s.delta,
        coalesce(s.is_contradictory, false) as is_contradictory,
        r.largest_abs_value >= 9007199254740992 as is_beyond_exact
    from samples_read as r
    left join snapshots as s
        on s.wave_id = r.wave_id and s.engine = r.engine and s.evidence = r.evidence
        and s.metric_name = r.metric_name
),

best as (
    -- an engine's first-preferred name the page carried
    select * from readings
    qualify row_number() over (
        partition by wave_id, engine, evidence order by preference
    ) = 1
),

meanings as (
    select distinct evidence, kind from names
),

grid as (
    select we.*, m.evidence, m.kind
    from wave_engine as we
    cross join meanings as m
),

final as (
    select
        g.wave_id,
        g.run_id,
        g.deployment,
        g.workload,
        g.concurrency,
        g.trial,
        g.engine,
        g.engine_source,
        g.evidence,
        g.kind,
        b.metric_name,
        case
            when b.is_beyond_exact or b.is_contradictory then null
            when g.kind = 'gauge' and g.evidence = 'kv_cache_usage'
                and not (b.peak_during between 0 and 1) then null
            when g.kind = 'gauge' and b.peak_during < 0 then null
            when g.kind = 'gauge' then b.peak_during
            when b.delta < 0 then null
            else b.delta
        end as value,
        case
            when b.is_beyond_exact or b.is_contradictory then null
            when g.kind = 'gauge' and (b.peak_during < 0 or (g.evidence = 'kv_cache_usage'
                and not (b.peak_during between 0 and 1))) then null
            when g.kind = 'gauge' then b.mean_during
        end as mean_during,
        coalesce(b.n_during, 0) as n_during_samples,
        case
            when b.is_beyond_exact or b.is_contradictory then 'unavailable'
            when g.kind = 'gauge' and g.evidence = 'kv_cache_usage'
                and not (b.peak_during between 0 and 1) then 'unavailable'
            when g.kind = 'gauge' and b.peak_during < 0 then 'unavailable'
            when g.kind = 'gauge' and b.peak_during is not null then 'measured'
            when g.kind <> 'gauge' and b.delta < 0 then 'unavailable'
            when g.kind <> 'gauge' and b.delta is not null then 'measured'
            else 'unavailable'
        end as status,
        case
            when not g.was_scraped
                then 'no scrape of the server: ' || coalesce(g.metrics_error, 'none taken')
            when g.engine is null then 'engine unknown: none declared, none named by the page'
            when not exists (
                select 1 from names as n
                where n.engine = g.engine and n.evidence = g.evidence
            ) then g.engine || ' publishes no metric for this'
            when b.metric_name is null then (
                select 'not on the page: ' || string_agg(n.metric_name, ', ' order by n.preference)
                from names as n
                where n.engine = g.engine and n.evidence = g.evidence
            )
            when b.is_beyond_exact
                then b.metric_name || ' read ' || printf('%g', b.largest_abs_value)
                    || ', beyond 2^53: no exact count or gauge'
            when b.is_contradictory
                then b.metric_name || ' listed twice on one page with different values'
            when g.kind = 'gauge' and b.peak_during is null
                then 'no sample during the wave (' || b.metric_name || ')'
            when g.kind = 'gauge' and g.evidence = 'kv_cache_usage'
                and not (b.peak_during between 0 and 1)
                then b.metric_name || ' read ' || b.peak_during || ', outside 0..1'
            when g.kind = 'gauge' and b.peak_during < 0
                then b.metric_name || ' read ' || b.peak_during || ', below 0'
            when g.kind <> 'gauge' and b.delta < 0
                then b.metric_name || ' went backwards during the wave (a restarted server?)'
            when g.kind <> 'gauge' and b.delta is null
                then 'no before/after pair (' || b.metric_name || ')'
        end as unavailable_reason
    from grid as g
    left join best as b
        on b.wave_id = g.wave_id and b.engine = g.engine and b.evidence = g.evidence
)

select * from final
