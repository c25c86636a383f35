-- What can change a number from one night to the next without the measured fleet changing,
-- one row per run × deployment (every deployment raw.deployments holds for the run): the
-- engine and its version, the model the server serves, when its process started, a hash of
-- the deployment's measured settings, the sparkcap and the judgement settings that computed
-- the night, the client host that measured it. Change detection sets a night's change beside
-- these, so that "8 % slower" reads with "engine 0.11.2 → 0.12.0" when both happened.
-- A text fact from several sources takes the first in a fixed order: engine_version from
-- vllm-version (GET /version) > sglang-server-info > llama-props (build_info) > metrics (a
-- *build_info* metric's version label); the model from vLLM's root (the weights behind a
-- served name) > the listing's id > the declared model.
{% set facts = ['engine_version', 'model_id', 'model_root', 'server_started_at', 'settings_hash', 'client_host'] %}
with deployments as (
    select run_id, deployment, model from {{ ref('stg_deployments') }}
),

runs as (
    select run_id, started_at, sparkcap_version from {{ ref('stg_runs') }}
),

engines as (
    select run_id, deployment, engine from {{ ref('int_deployment_facts') }}
),

context_facts as (
    select
        run_id,
        deployment,
        fact,
        fact_value,
        fact_text,
        fact_source,
        recorded_at,
        case fact_source
            when 'sparkcap' then 0
            when 'vllm-version' then 1
            when 'sglang-server-info' then 2
            when 'llama-props' then 3
            when 'vllm-models' then 4
            when 'models-listing' then 5
            when 'metrics' then 6
        end as source_rank
    from {{ ref('stg_deployment_facts') }}
    where fact in ('{{ facts | join("', '") }}')
        and (fact_value is not null or fact_text is not null)
),

winners as (
    {{ best_source_facts('context_facts') }}
),

pivoted as (
    select
        run_id,
        deployment,
        {%- for f in facts %}
        max(fact_text) filter (where fact = '{{ f }}') as {{ f }}_text,
        max(fact_value) filter (where fact = '{{ f }}') as {{ f }}_value,
        max(fact_source) filter (where fact = '{{ f }}') as {{ f }}_source{{ "," if not loop.last }}
        {%- endfor %}
    from winners
    group by run_id, deployment
),

final as (
    select
        d.run_id,
        d.deployment,
        e.engine,
        p.engine_version_text as engine_version,
        p.engine_version_source,
        coalesce(p.model_root_text, p.model_id_text, d.model) as model_id,
        case
            when p.model_root_text is not null then 'vllm-models'
            when p.model_id_text is not null then 'models-listing'
            else 'declared'
        end as model_id_source,
        to_timestamp(p.server_started_at_value) as server_started_at,
        p.settings_hash_text as settings_hash,
        r.sparkcap_version,
        {{ judgement_settings() }} as judgement_settings,
        p.client_host_text as client_host,
        r.started_at as run_started_at
    from deployments as d
    left join runs as r on d.run_id = r.run_id
    left join engines as e on d.run_id = e.run_id and d.deployment = e.deployment
    left join pivoted as p on d.run_id = p.run_id and d.deployment = p.deployment
)

select * from final
