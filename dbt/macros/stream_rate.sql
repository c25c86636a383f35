{#
  A stream's decode rate (the study's definition): (output tokens − 1) over the time from its
  first to its last token, for a stream that ended ok with at least two counted tokens. The one
  place the formula is written: int_stream_rates uses it, and so does the live search judge
  (sparkcap/transform/live_judge.py), which compiles it with the search rule.
#}
{% macro stream_decode_tok_s(status, completion_tokens, first_token_ns, last_token_ns) -%}
    case
        when {{ status }} = 'ok'
            and {{ completion_tokens }} >= 2
            and {{ last_token_ns }} > {{ first_token_ns }}
            then ({{ completion_tokens }} - 1) / (({{ last_token_ns }} - {{ first_token_ns }}) / 1e9)
    end
{%- endmacro %}


{#
  The first content chunk's tokens, k1: the server's own per-chunk count where it streamed
  one, else the completion's tokens shared out by the first chunk's share of the text, else 1.
  A server that sends k tokens per chunk (a stream interval, a buffering proxy, a speculative
  decoder after its first token) brings k1 tokens at the first-token stamp that no interval
  times; the study's (n - 1) / span then reads higher the shorter the stream, by about
  (k1 - 1) / (n - 1). Clamped to 1 .. n - 1.
#}
{% macro first_chunk_tokens(completion_tokens, first_chunk_counted, first_chunk_chars, total_chars) -%}
    least(
        greatest(
            coalesce(
                {{ first_chunk_counted }}::double,
                {{ completion_tokens }} * {{ first_chunk_chars }}::double
                    / nullif({{ total_chars }}, 0),
                1.0
            ),
            1.0
        ),
        greatest({{ completion_tokens }} - 1, 1)::double
    )
{%- endmacro %}


{#
  The decode rate a level is judged by: the study's rate of the stream as the user asks for
  it. A full-length stream (length_factor >= 1: the grid's, a sustain wave's) is the study's
  formula exactly. A stream a search shortened to `length_factor` of its full length N stands
  in for that full stream: the rate of the tokens its interval times, (n - k1) / span, is
  length-free, and the study's rate of the full stream is that times (N - 1) / (N - k1).
  With one token per chunk (k1 = 1) both are (n - 1) / span. Written once: int_stream_rates
  and, compiled, the live search judge use it.
#}
{% macro level_decode_tok_s(
    status, completion_tokens, first_token_ns, last_token_ns, requested_tokens, length_factor,
    k1
) -%}
    case
        when not ({{ status }} = 'ok'
            and {{ completion_tokens }} >= 2
            and {{ last_token_ns }} > {{ first_token_ns }})
            then null
        when coalesce({{ length_factor }}, 1.0) >= 1.0
            then ({{ completion_tokens }} - 1) / (({{ last_token_ns }} - {{ first_token_ns }}) / 1e9)
        else ({{ completion_tokens }} - ({{ k1 }}))
            / (({{ last_token_ns }} - {{ first_token_ns }}) / 1e9)
            * (greatest(round({{ requested_tokens }} / {{ length_factor }}), {{ completion_tokens }}) - 1)
            / (greatest(round({{ requested_tokens }} / {{ length_factor }}), {{ completion_tokens }}) - ({{ k1 }}))
    end
{%- endmacro %}
