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


{#- What k1 is read from, per stream: the first content chunk's per-chunk count (NULL unless
    the server gave them) and characters, and all its chunks' characters. `chunks`:
    request_id, seq, n_tokens, n_chars. int_stream_rates and the live judge both use it. -#}
{% macro first_chunk_figures(chunks) -%}
    select
        request_id,
        arg_min(n_tokens, seq) as first_chunk_counted_tokens,
        arg_min(n_chars, seq) as first_chunk_chars,
        sum(n_chars) as total_chars
    from {{ chunks }}
    group by request_id
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
  With one token per chunk (k1 = 1) both are (n - 1) / span. Where the wave's chunks give
  one, the window estimate (window_decode_tok_s below) replaces that: it also leaves out the
  wave's staggered starts and cut last chunks. Written once: int_stream_rates and, compiled,
  the live search judge use it.
#}
{#- N, the full output length a shortened stream stands in for: recorded with the stream
    (raw.requests.full_tokens), else its request's length over the wave's length factor
    (older warehouses; wrong where a floor such as min_trial_tokens set the length). -#}
{% macro full_length_tokens(full_tokens, requested_tokens, length_factor) -%}
    coalesce({{ full_tokens }}, round({{ requested_tokens }} / {{ length_factor }}))
{%- endmacro %}


{% macro level_decode_tok_s(
    status, completion_tokens, first_token_ns, last_token_ns, full_tokens, length_factor,
    k1, window_tok_s='null'
) -%}
    case
        when not ({{ status }} = 'ok'
            and {{ completion_tokens }} >= 2
            and {{ last_token_ns }} > {{ first_token_ns }})
            then null
        when coalesce({{ length_factor }}, 1.0) >= 1.0
            then ({{ completion_tokens }} - 1) / (({{ last_token_ns }} - {{ first_token_ns }}) / 1e9)
        when {{ window_tok_s }} is not null then {{ window_tok_s }}
        else ({{ completion_tokens }} - ({{ k1 }}))
            / (({{ last_token_ns }} - {{ first_token_ns }}) / 1e9)
            * (greatest({{ full_tokens }}, {{ completion_tokens }}) - 1)
            / (greatest({{ full_tokens }}, {{ completion_tokens }}) - ({{ k1 }}))
    end
{%- endmacro %}


{#
  The rate of record for streams a search shortened, judged from the moment every stream of
  the wave decodes. A short stream's life has more of its wave's ragged start in it than a
  full one's: streams that start while others still prefill decode in prefill-stretched
  steps; and a last chunk cut short by the length limit brings fewer tokens than a step
  does. So per wave the window opens at the last stream's first token, and per stream it
  runs from a (its last chunk at or before the opening) to b (its second-to-last chunk).
  (Closing it at the wave's first second-to-last chunk instead also cut the speed-up of the
  wave's spread ends, which full-length streams have too: 1.4 % slow at 16 speculative
  streams in benchmarks/short_vs_full.py.)
  The stream's steady rate is rho = tokens in (a, b] / (b - a); the full-length stream of N
  tokens has the same start (to a) and the same last chunk (after b), and the rest at rho:
      T_N = (a - first) + (N - tokens by a - tokens after b) / rho + (last - b),
      rate = (N - 1) / T_N.
  With n = N this is the study's formula exactly. A chunk's tokens are the server's per-chunk count where every chunk had one, else
  the completion shared out by the chunk's share of the characters.

  `streams`: request_id, wave_id, status, completion_tokens, first_token_ns, last_token_ns,
  full_tokens, requested_tokens, length_factor (shortened streams); `chunks`: request_id, seq, t_ns, n_tokens, n_chars.
  One row per stream whose window holds an interval: request_id, window_decode_tok_s.
#}
{% macro window_decode_tok_s(streams, chunks) -%}
with w_streams as (
    select * from {{ streams }}
    where status = 'ok' and completion_tokens >= 3 and length_factor < 1
),

w_sizes as (
    select
        c.request_id,
        count(*) as n_chunks,
        max(c.seq) as last_seq,
        sum(c.n_chars) as total_chars,
        count(c.n_tokens) = count(*) as all_counted
    from {{ chunks }} as c
    inner join w_streams as s on s.request_id = c.request_id
    group by c.request_id
),

w_chunks as (
    select
        c.request_id,
        s.wave_id,
        c.seq,
        c.t_ns,
        z.last_seq,
        sum(
            case
                when z.all_counted then c.n_tokens::double
                else s.completion_tokens * c.n_chars::double / nullif(z.total_chars, 0)
            end
        ) over (partition by c.request_id order by c.seq rows unbounded preceding)
            as tokens_so_far
    from {{ chunks }} as c
    inner join w_streams as s on s.request_id = c.request_id
    inner join w_sizes as z on z.request_id = c.request_id
    where z.n_chunks >= 3
),

w_window as (
    select wave_id, max(t_ns) filter (where seq = 0) as opens_ns
    from w_chunks
    group by wave_id
),

w_bounds as (
    select
        c.request_id,
        max_by(c.t_ns, c.seq) filter (where c.t_ns <= w.opens_ns) as a_ns,
        max_by(c.tokens_so_far, c.seq) filter (where c.t_ns <= w.opens_ns) as a_tokens,
        max(c.t_ns) filter (where c.seq = c.last_seq - 1) as b_ns,
        max(c.tokens_so_far) filter (where c.seq = c.last_seq - 1) as b_tokens
    from w_chunks as c
    inner join w_window as w on w.wave_id = c.wave_id
    group by c.request_id
),

w_rates as (
    select
        s.request_id,
        s.first_token_ns,
        s.last_token_ns,
        s.completion_tokens,
        b.b_ns,
        b.b_tokens,
        greatest(
            {{ full_length_tokens('s.full_tokens', 's.requested_tokens', 's.length_factor') }},
            s.completion_tokens
        ) as full_tokens,
        b.a_ns,
        b.a_tokens,
        (b.b_tokens - b.a_tokens) / ((b.b_ns - b.a_ns) / 1e9) as steady_tok_s
    from w_streams as s
    inner join w_bounds as b on b.request_id = s.request_id
    where b.b_ns > b.a_ns and b.b_tokens > b.a_tokens
)

select
    request_id,
    (full_tokens - 1) / (
        (a_ns - first_token_ns) / 1e9
        + (full_tokens - a_tokens - (completion_tokens - b_tokens)) / steady_tok_s
        + (last_token_ns - b_ns) / 1e9
    ) as window_decode_tok_s
from w_rates
{%- endmacro %}
