{#
  Tokens per stream per second of `n_streams` streams over a window of `window_s` seconds,
  from the `tokens` their chunks brought inside it: no chunk at all is a rate of 0, not
  unknown (the streams were held and decoded nothing). The probes' background rates
  (fct_prefill_interference, int_ladder_background) are this one formula.
#}
{% macro window_stream_tok_s(tokens, window_s, n_streams) -%}
    coalesce({{ tokens }}, 0) / ({{ window_s }}) / ({{ n_streams }})
{%- endmacro %}

{#
  A chunk's tokens where the server did not say (no continuous usage): the stream's mean, its
  final usage over its chunks. The windowed rates above count each chunk this way.
#}
{% macro mean_chunk_tokens(completion_tokens, n_chunks) -%}
    {{ completion_tokens }}::double / nullif({{ n_chunks }}, 0)
{%- endmacro %}
