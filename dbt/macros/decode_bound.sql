{#
  The memory-bandwidth bound of a decode step, written once (int_level_diagnosis for each
  measured level, fct_bottlenecks for the streams the memory could carry at the threshold).

  Weight bytes a step at `streams` streams reads: a dense model's all; a mixture of experts'
  shared bytes plus the expected distinct routed experts a batch of `streams` tokens touches
  per layer, E (1 - (1 - k/E)^streams), each `expert_bytes` (summed over the MoE layers).
#}
{% macro weight_bytes_per_step(dense_bytes, experts, experts_per_token, expert_bytes, shared_bytes, streams) -%}
    case
        when {{ experts }} is not null
            then {{ shared_bytes }} + {{ experts }}::double
                * (1 - power(1 - {{ experts_per_token }}::double / {{ experts }}, {{ streams }}))
                * {{ expert_bytes }}
        else {{ dense_bytes }}
    end
{%- endmacro %}


{#
  The per-stream decode rate the memory allows: each step moves the weights it touches plus
  every stream's KV cache (streams x mean context x KV bytes per token) and gives each stream
  `tokens_per_step` tokens (1, or 1 + accepted drafts with a speculative decoder), so
      bound = tokens_per_step x bandwidth / (weight bytes + streams x context x KV bytes).
#}
{% macro decode_bound_tok_s(tokens_per_step, bandwidth_bytes_s, weight_bytes, streams, context_tokens, kv_bytes_per_token) -%}
    {{ tokens_per_step }} * {{ bandwidth_bytes_s }} / (
        {{ weight_bytes }} + {{ streams }} * {{ context_tokens }} * {{ kv_bytes_per_token }}
    )
{%- endmacro %}
