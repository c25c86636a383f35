-- What the server's own counters say about each wave: after − before for every counter, and
-- the speculative acceptance Δaccepted / Δdrafted. On a server hosting several models the
-- samples labelled with the wave's model are used; unlabelled samples otherwise.
with samples as (
    select * from {{ ref('stg_server_metrics') }}
),

waves as (
    select wave_id, model from {{ ref('stg_waves') }}
),

deltas as (
    select
        s.wave_id,
        s.metric_name,
        s.metric_labels,
        any_value(s.metric_label_map) as metric_label_map,
        max(s.metric_value) filter (where s.phase = 'after')
            - max(s.metric_value) filter (where s.phase = 'before') as delta
    from samples as s
    group by s.wave_id, s.metric_name, s.metric_labels
),

relevant as (
    -- unlabelled samples, or samples one of whose label values is the wave's model; nights
    -- before the structured labels (label_map NULL) fall back to their text form
    select d.*
    from deltas as d
    inner join waves as w on w.wave_id = d.wave_id
    where d.metric_labels = ''
        or coalesce(
            list_contains(map_values(d.metric_label_map), w.model),
            d.metric_labels like '%"' || w.model || '"%'
        )
),

final as (
    select
        wave_id,
        sum(delta) filter (where metric_name like '%spec_decode_num_draft_tokens_total')
            as server_draft_tokens,
        sum(delta) filter (where metric_name like '%spec_decode_num_accepted_tokens_total')
            as server_accepted_tokens,
        sum(delta) filter (
            where metric_name in ('llamacpp:tokens_predicted_total', 'sim:generation_tokens_total',
                                  'vllm:generation_tokens_total', 'sglang:generation_tokens_total')
        ) as server_generated_tokens,
        case
            when sum(delta) filter (where metric_name like '%spec_decode_num_draft_tokens_total') > 0
                then sum(delta) filter (
                    where metric_name like '%spec_decode_num_accepted_tokens_total')
                    / sum(delta) filter (
                        where metric_name like '%spec_decode_num_draft_tokens_total')
        end as spec_acceptance
    from relevant
    group by wave_id
)

select * from final
