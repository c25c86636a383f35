-- The plan under open-loop arrivals, for the whole fleet: per `sparkcap replay` (its
-- replay_id: two replays at one factor and seed are two verdicts, never one), the
-- plan holds when every deployment's replay holds; otherwise it fails at the deployments named
-- (or gives no verdict where a client fell behind or nothing was measured). A planned
-- deployment whose replay never ran is named and the plan never holds without it. A plan that
-- holds
-- where long prompts were routed but none fell in a replay's counted time says its prefill
-- budget went untested there.
with replays as (
    select * from {{ ref('fct_replay') }}
),

final as (
    select
        run_id,
        replay_id,
        any_value(rate_factor) as rate_factor,
        any_value(seed) as seed,
        min(started_at) as started_at,
        count(*) as n_deployments,
        count(*) filter (where verdict = 'holds') as n_holding,
        string_agg(deployment, ', ' order by deployment) filter (where verdict = 'fails')
            as failing_deployments,
        string_agg(deployment || ': ' || verdict_text, '; ' order by deployment)
            filter (where verdict = 'fails') as failing_reasons,
        string_agg(deployment, ', ' order by deployment)
            filter (where verdict not in ('holds', 'fails', 'not replayed'))
            as unjudged_deployments,
        string_agg(deployment, ', ' order by deployment) filter (where verdict = 'not replayed')
            as unreplayed_deployments,
        string_agg(deployment, ', ' order by deployment) filter (where long_prompts_untested)
            as prefill_untested_deployments,
        case
            when count(*) filter (where verdict = 'fails') > 0
                then 'fails at ' || string_agg(deployment, ', ' order by deployment)
                    filter (where verdict = 'fails')
                    || coalesce('; not replayed at ' || string_agg(deployment, ', '
                        order by deployment) filter (where verdict = 'not replayed'), '')
            when count(*) filter (where verdict = 'not replayed') > 0
                then 'is not shown to hold: not replayed at ' || string_agg(deployment, ', '
                    order by deployment) filter (where verdict = 'not replayed')
            -- what kept each deployment from a verdict, in the words a person acts on
            when count(*) filter (where verdict <> 'holds') > 0
                then 'gives no verdict: ' || string_agg(deployment || ' ' || case verdict
                        when 'no verdict' then '(the client fell behind its schedule)'
                        else '(' || verdict || ')' end, ', '
                    order by deployment) filter (where verdict <> 'holds')
            else 'holds' || coalesce(' (the prefill budget untested at '
                || string_agg(deployment, ', ' order by deployment)
                    filter (where long_prompts_untested) || ')', '')
        end as plan_verdict
    from replays
    group by run_id, replay_id
)

select * from final
