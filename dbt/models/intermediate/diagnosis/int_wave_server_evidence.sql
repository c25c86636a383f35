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

readings as (
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
        sum(r.metric_value) filter (where r.phase = 'after')
            - sum(r.metric_value) filter (where r.phase = 'before') as delta
    from relevant as r
    inner join names as n on n.metric_name = r.metric_name
    group by all
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
            when g.kind = 'gauge' and g.evidence = 'kv_cache_usage'
                and not (b.peak_during between 0 and 1) then null
            when g.kind = 'gauge' and b.peak_during < 0 then null
            when g.kind = 'gauge' then b.peak_during
            when b.delta < 0 then null
            else b.delta
        end as value,
        case
            when g.kind = 'gauge' and (b.peak_during < 0 or (g.evidence = 'kv_cache_usage'
                and not (b.peak_during between 0 and 1))) then null
            when g.kind = 'gauge' then b.mean_during
        end as mean_during,
        coalesce(b.n_during, 0) as n_during_samples,
        case
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
