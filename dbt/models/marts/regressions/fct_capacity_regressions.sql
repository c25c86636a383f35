-- The regression gate (macro regression_gate) on every built night against the night before
-- it: each run with a built capacity is judged against the run with a built capacity that
-- started just before it, as `sparkcap compare PREVIOUS RUN --fail-on regression` would judge
-- it (compare judges any two runs with the same macro, compiled).
with capacities as (
    select * from {{ ref('fct_capacity') }}
),

runs as (
    select run_id, started_at from {{ ref('stg_runs') }}
),

built_runs as (
    select distinct r.run_id, r.started_at
    from runs as r
    inner join capacities as c on c.run_id = r.run_id
),

ordered as (
    select
        lag(run_id) over (order by started_at, run_id) as earlier_run_id,
        run_id as later_run_id
    from built_runs
),

run_pairs as (
    -- the first built night has no night before it to be judged against
    select * from ordered where earlier_run_id is not null
),

gate as (
    {{ regression_gate('capacities', 'run_pairs') }}
)

select * from gate
