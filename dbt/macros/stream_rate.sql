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
