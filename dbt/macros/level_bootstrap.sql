{#
  The seeded bootstrap of a level median, written once. A level's interval is asked for in
  three places: fct_levels (through int_level_bootstrap, whose samples int_capacity_bootstrap
  also turns into the capacity interval), int_search_levels and the live search judge
  (both through search_level_interval). Two copies once hashed different keys and sorted
  streams differently, so the same trials could get two intervals; now every caller hashes
  the key level_key() builds (loadgen/search.level_key builds the same one) and picks its
  bounds with bootstrap_interval().
#}

{#- The key a level's pseudo-random picks are hashed with: run/deployment/workload/kind/cN,
    kind 'level' (every sweep level, grid or search) or 'sustain'. -#}
{% macro level_key(run_id, deployment, workload, kind, concurrency) -%}
    {{ run_id }} || '/' || {{ deployment }} || '/' || {{ workload }} || '/' || {{ kind }}
        || '/c' || {{ concurrency }}
{%- endmacro %}

{#- `streams`: one row per counted stream with level_key (varchar), trial (integer) and
    decode_tok_s (double; NULL rows are left out). One row per level_key and sample (0 ..
    var('bootstrap_samples') - 1): boot_median_tok_s, the median of trial medians after
    resampling trials with replacement, then each picked trial's streams with replacement;
    beside it the level's n_trials, n_samples (stream rates) and median_decode_tok_s (median
    of trial medians). A pick is a hash of the text seed/level_key/sample/pick[/slot] (DuckDB's
    hash of several integers that differ only in the last gives complementary low bits: with
    2 trials every sample picked one trial twice, with 2 streams never the same twice) and streams
    are numbered by rate within their trial, so the same rates give the same interval whoever
    asks and in whatever order the rows arrive. -#}
{% macro level_bootstrap(streams) -%}
with b_in as (
    select
        level_key, trial, decode_tok_s,
        row_number() over (partition by level_key, trial order by decode_tok_s) - 1
            as stream_slot
    from {{ streams }}
    where decode_tok_s is not null
),

b_trials as (
    select
        level_key, trial,
        count(*) as n_streams,
        median(decode_tok_s) as trial_median,
        dense_rank() over (partition by level_key order by trial) - 1 as trial_slot
    from b_in
    group by level_key, trial
),

b_levels as (
    select
        level_key,
        count(*) as n_trials,
        sum(n_streams) as n_samples,
        median(trial_median) as median_decode_tok_s
    from b_trials
    group by level_key
),

b_samples as (
    select unnest(range({{ var('bootstrap_samples') }})) as sample
),

b_trial_picks as (
    select
        l.level_key, s.sample, k.pick,
        hash(concat_ws('/', {{ var('bootstrap_seed') }}, l.level_key, s.sample, k.pick))
            % l.n_trials
            as trial_slot
    from b_levels as l
    cross join b_samples as s
    cross join lateral (select unnest(range(l.n_trials)) as pick) as k
),

b_stream_picks as (
    select
        p.level_key, p.sample, p.pick, t.trial,
        hash(concat_ws('/', {{ var('bootstrap_seed') }}, p.level_key, p.sample, p.pick, j.slot, 'stream'))
            % t.n_streams as stream_slot
    from b_trial_picks as p
    inner join b_trials as t
        on t.level_key = p.level_key and t.trial_slot = p.trial_slot
    cross join lateral (select unnest(range(t.n_streams)) as slot) as j
),

b_picked_trials as (
    select sp.level_key, sp.sample, sp.pick, median(i.decode_tok_s) as trial_median
    from b_stream_picks as sp
    inner join b_in as i
        on i.level_key = sp.level_key and i.trial = sp.trial and i.stream_slot = sp.stream_slot
    group by sp.level_key, sp.sample, sp.pick
),

b_boot as (
    select level_key, sample, median(trial_median) as boot_median_tok_s
    from b_picked_trials
    group by level_key, sample
)

select
    l.level_key,
    l.n_trials,
    l.n_samples,
    l.median_decode_tok_s,
    b.sample,
    b.boot_median_tok_s
from b_levels as l
inner join b_boot as b on b.level_key = l.level_key
{%- endmacro %}

{#- The interval's bounds, an aggregate over one level's bootstrap samples: the sorted sample
    medians at `low_share` and `high_share` of the way, rounded outward to a sample (never
    interpolated). The position is rounded to 9 decimals first, so 0.05 and (1 - 0.9) / 2 pick
    the same sample. Columns ci_low_tok_s, ci_high_tok_s. -#}
{% macro bootstrap_interval(boot_median, low_share, high_share) -%}
    list_sort(list({{ boot_median }}))[
        1 + cast(floor(round(({{ low_share }}) * (count(*) - 1), 9)) as integer)
    ] as ci_low_tok_s,
    list_sort(list({{ boot_median }}))[
        1 + cast(ceil(round(({{ high_share }}) * (count(*) - 1), 9)) as integer)
    ] as ci_high_tok_s
{%- endmacro %}
