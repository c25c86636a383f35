{#
  The search's level rule, written once. `int_search_levels` (the verdict of record) and the
  live search (sparkcap/transform/live_judge.py, which compiles this macro once per night and runs it
  in-process on the live figures of the level just measured) both call it, so a search decides
  with the very SQL the marts judge by.

  `streams` is a relation with one row per counted stream:
    level_key (varchar), trial (integer), decode_tok_s (double), confidence (double)
  Returned, one row per level_key: n_trials, n_samples, median_decode_tok_s (median of trial
  medians), ci_low_tok_s / ci_high_tok_s (a seeded bootstrap of that median: trials resampled
  with replacement, then each picked trial's streams) and the verdict at the threshold:
  'pass' (interval above it), 'fail' (below), 'straddles' (neither, or fewer than
  var('search_min_samples') stream rates: one stream's rate is no interval), and
  passes_median, the direction a straddling level sends the search (the grid's rule).
#}
{% macro search_level_interval(streams) -%}
with s_in as (
    select
        level_key, trial, decode_tok_s, confidence,
        row_number() over (partition by level_key, trial order by decode_tok_s) - 1
            as stream_slot
    from {{ streams }}
    where decode_tok_s is not null
),

s_trial_medians as (
    select
        level_key, trial,
        count(*) as n_streams,
        median(decode_tok_s) as trial_median,
        any_value(confidence) as confidence,
        dense_rank() over (partition by level_key order by trial) - 1 as trial_slot
    from s_in
    group by level_key, trial
),

s_levels as (
    select
        level_key,
        count(*) as n_trials,
        sum(n_streams) as n_samples,
        median(trial_median) as median_decode_tok_s,
        any_value(confidence) as confidence
    from s_trial_medians
    group by level_key
),

s_samples as (
    select unnest(range({{ var('bootstrap_samples') }})) as sample
),

s_trial_picks as (
    select
        l.level_key, s.sample, k.pick,
        hash({{ var('bootstrap_seed') }}, l.level_key, s.sample, k.pick) % l.n_trials
            as trial_slot
    from s_levels as l
    cross join s_samples as s
    cross join lateral (select unnest(range(l.n_trials)) as pick) as k
),

s_stream_picks as (
    select
        p.level_key, p.sample, p.pick, t.trial,
        hash({{ var('bootstrap_seed') }}, p.level_key, p.sample, p.pick, j.slot, 'stream')
            % t.n_streams as stream_slot
    from s_trial_picks as p
    inner join s_trial_medians as t
        on t.level_key = p.level_key and t.trial_slot = p.trial_slot
    cross join lateral (select unnest(range(t.n_streams)) as slot) as j
),

s_picked_trials as (
    select sp.level_key, sp.sample, sp.pick, median(i.decode_tok_s) as trial_median
    from s_stream_picks as sp
    inner join s_in as i
        on i.level_key = sp.level_key and i.trial = sp.trial and i.stream_slot = sp.stream_slot
    group by sp.level_key, sp.sample, sp.pick
),

s_boot as (
    select level_key, list_sort(list(boot_median)) as sorted, count(*) as n_boot
    from (
        select level_key, sample, median(trial_median) as boot_median
        from s_picked_trials
        group by level_key, sample
    )
    group by level_key
),

s_interval as (
    select
        l.level_key,
        l.n_trials,
        l.n_samples,
        l.confidence,
        l.median_decode_tok_s,
        b.sorted[1 + cast(floor((1 - l.confidence) / 2 * (b.n_boot - 1)) as integer)]
            as ci_low_tok_s,
        b.sorted[1 + cast(ceil((1 + l.confidence) / 2 * (b.n_boot - 1)) as integer)]
            as ci_high_tok_s
    from s_levels as l
    inner join s_boot as b on b.level_key = l.level_key
)

select
    *,
    coalesce(median_decode_tok_s >= {{ var('threshold_tok_s') }}, false) as passes_median,
    case
        when n_samples < {{ var('search_min_samples') }} then 'straddles'
        when ci_low_tok_s >= {{ var('threshold_tok_s') }} then 'pass'
        when ci_high_tok_s < {{ var('threshold_tok_s') }} then 'fail'
        else 'straddles'
    end as verdict
from s_interval
{%- endmacro %}


{#- A capacity figure capped below the smallest level whose sustain wave fell (a column
    first_unsustained_streams in scope). DuckDB's least() skips NULLs, so a missing value
    stays missing and only a fallen sustain caps. -#}
{% macro capped_below_fallen_sustain(column) -%}
    case
        when {{ column }} is not null and first_unsustained_streams is not null
            then least({{ column }}, first_unsustained_streams - 1)
        else {{ column }}
    end
{%- endmacro %}
