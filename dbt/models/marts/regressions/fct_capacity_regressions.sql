-- The regression gate (macro regression_gate) on every built night against the night before
-- it of the same fleet: each run with a built capacity is judged against the run of its fleet
-- (stg_runs.fleet_name) with a built capacity that started just before it, as `sparkcap
-- compare PREVIOUS RUN --fail-on regression` would judge it (compare judges any two runs with
-- the same macro, compiled). A warehouse that several fleets share holds one chain per fleet:
-- another fleet's deployments are not this fleet's to lose. Ad-hoc sweeps (no fleet) form one
-- chain of their own.
with capacities as (
    select * from {{ ref('fct_capacity') }}
),

runs as (
    select run_id, started_at, fleet_name from {{ ref('stg_runs') }}
),

built_runs as (
    select distinct r.run_id, r.started_at, r.fleet_name
    from runs as r
    inner join capacities as c on c.run_id = r.run_id
),

ordered as (
    select
        fleet_name,
        lag(run_id) over (partition by fleet_name order by started_at, run_id) as earlier_run_id,
        run_id as later_run_id
    from built_runs
),

run_pairs as (
    -- the first built night of a fleet has no night before it to be judged against
    select * from ordered where earlier_run_id is not null
),

gate as (
    {{ regression_gate('capacities', 'run_pairs') }}
),

final as (
    select
        p.fleet_name,
        g.*
    from gate as g
    inner join run_pairs as p on p.later_run_id = g.later_run_id
)

select * from final
