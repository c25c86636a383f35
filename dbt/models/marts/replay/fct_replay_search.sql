-- lambda* found by replays (`sparkcap replay --search`): per search and deployment, its steps'
-- rate factors (times the plan's rates, whose factor 1.0 is the open-loop model's lambda* line
-- for the rate plan) and verdicts; the replays bracket lambda* between the largest factor that
-- held below the smallest that failed. A step too short to decide or without a verdict
-- brackets nothing. Beside the bracket, the model's lambda* is factor 1.0 of the rate plan: the
-- error of the model is where 1.0 falls against the bracket.
with replays as (
    select * from {{ ref('fct_replay') }}
    where search_id is not null
),

per_deployment as (
    select
        run_id,
        search_id,
        deployment,
        any_value(plan_kind) as plan_kind,
        count(*) as n_steps,
        string_agg(round(rate_factor, 3) || ': ' || verdict, ', ' order by started_at)
            as steps,
        min(rate_factor) filter (where verdict = 'fails') as lowest_failing_factor,
        -- the offer's rates at factor 1.0, requests a minute (a replica)
        any_value((code_per_s + prose_per_s) * 60) as plan_requests_per_min
    from replays
    group by run_id, search_id, deployment
),

bracket as (
    select p.*,
        (select max(r.rate_factor) from replays as r
         where r.search_id = p.search_id and r.deployment = p.deployment
           and r.verdict = 'holds'
           and r.rate_factor < coalesce(p.lowest_failing_factor, 'infinity'))
            as highest_holding_factor
    from per_deployment as p
),

final as (
    select
        *,
        highest_holding_factor * plan_requests_per_min as holds_requests_per_min,
        lowest_failing_factor * plan_requests_per_min as fails_requests_per_min,
        case
            when highest_holding_factor is not null and lowest_failing_factor is not null
                then 'lambda* by replay between ' || round(highest_holding_factor, 3) || 'x and '
                    || round(lowest_failing_factor, 3) || 'x the plan ('
                    || round(highest_holding_factor * plan_requests_per_min, 1) || '-'
                    || round(lowest_failing_factor * plan_requests_per_min, 1)
                    || ' requests a minute a replica)'
                    || case when plan_kind = 'rate' then case
                        when 1.0 < highest_holding_factor then '; the model is low: its lambda* '
                            || 'is 1x, below the bracket'
                        when 1.0 >= lowest_failing_factor then '; the model is high: its '
                            || 'lambda* is 1x, above the bracket'
                        else '; the model''s lambda* (1x) within it' end else '' end
            when highest_holding_factor is not null
                then 'holds at every factor tried, up to ' || round(highest_holding_factor, 3)
                    || 'x: lambda* is above it'
            when lowest_failing_factor is not null
                then 'fails at every factor tried, down to ' || round(lowest_failing_factor, 3)
                    || 'x: lambda* is below it'
            else 'no step decided (' || steps || ')'
        end as search_text
    from bracket
)

select * from final
