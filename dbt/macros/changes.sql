{#
  The formulas of change detection (issue 27), written once: the level test's permutation
  p-value, the normal quantile the drift interval needs, and the words for what else changed
  between two nights' int_run_context rows. Models: intermediate/changes, marts/changes.
#}

{#- `pool`: one row per trial median of a test, columns test_key (varchar), in_night
    (boolean: the night tested, else a baseline night's trial) and value (double). One row per
    test_key with n_night (k), n_pool (n), rank_sum (the night's trials' ranks in the pool,
    ties averaged) and p_value: the two-sided permutation p-value of the rank sum (Wilcoxon's
    statistic), (1 + #{permutations with |W - k(n+1)/2| >= |W_observed - k(n+1)/2|}) / (1 +
    var('change_permutations')). Ranks, not the difference of medians: with three trials a
    night's median is one trial, and a slowdown already in a baseline night made a clear
    one read p = 0.3. A permutation deals the pool's ranks afresh, k of them to the night:
    each trial's place is a hash of the one text seed/test_key/perm/slot (macros/level_bootstrap:
    DuckDB's hash of integers differing in the last gives complementary low bits), slots
    numbered by value, so the same trials give the same p-value in whatever order they
    arrive. The smallest p-value a night can reach is 2 / C(n, k) (its trials the k slowest
    or fastest), resolved to 1 / (1 + var('change_permutations')). -#}
{% macro change_permutation_test(pool) -%}
with p_in as (
    select
        test_key, in_night, value,
        row_number() over (partition by test_key order by value, in_night) - 1 as slot,
        rank() over (partition by test_key order by value)
            + (count(*) over (partition by test_key, value) - 1) / 2.0 as value_rank
    from {{ pool }}
    where value is not null
),

p_sizes as (
    select
        test_key,
        count(*) filter (where in_night) as n_night,
        count(*) as n_pool,
        sum(value_rank) filter (where in_night) as rank_sum,
        count(*) filter (where in_night) * (count(*) + 1) / 2.0 as expected_rank_sum
    from p_in
    group by test_key
    having count(*) filter (where in_night) > 0 and count(*) filter (where not in_night) > 0
),

p_perms as (
    select unnest(range({{ var('change_permutations') }})) as perm
),

p_dealt as (
    select
        i.test_key, p.perm, i.value_rank,
        row_number() over (
            partition by i.test_key, p.perm
            order by hash(concat_ws('/', {{ var('bootstrap_seed') }}, i.test_key, 'perm', p.perm, i.slot)), i.slot
        ) <= s.n_night as to_night
    from p_in as i
    inner join p_sizes as s on s.test_key = i.test_key
    cross join p_perms as p
),

p_stats as (
    select test_key, perm, sum(value_rank) filter (where to_night) as permuted_rank_sum
    from p_dealt
    group by test_key, perm
)

select
    s.test_key,
    s.n_night,
    s.n_pool,
    s.rank_sum,
    (1 + count(*) filter (
        where abs(t.permuted_rank_sum - s.expected_rank_sum)
            >= abs(s.rank_sum - s.expected_rank_sum) - 1e-9
    )) / (1 + {{ var('change_permutations') }})::double as p_value
from p_sizes as s
inner join p_stats as t on t.test_key = s.test_key
group by s.test_key, s.n_night, s.n_pool, s.rank_sum, s.expected_rank_sum
{%- endmacro %}

{#- The pool of change_permutation_test for each row of `nights` (columns night_key, the
    row's trial_medians_tok_s, deployment, workload, concurrency and `baseline_index`): the
    row's trial medians (in_night) against those of the baseline nights of night
    `baseline_index` (`members`: int_change_levels' baseline nights of each comparable night),
    test_key the row's night_key || '/b' || its baseline_index. `where`: which rows are tested
    (alias n). -#}
{% macro change_test_pool(nights, baseline_index, members='members', where='true') -%}
    select n.night_key || '/b' || n.{{ baseline_index }} as test_key, true as in_night,
        unnest(n.trial_medians_tok_s) as value
    from {{ nights }} as n
    where {{ where }}
    union all
    select n.night_key || '/b' || n.{{ baseline_index }}, false, unnest(m.trial_medians_tok_s)
    from {{ nights }} as n
    inner join {{ members }} as m
        on m.deployment = n.deployment and m.workload = n.workload
        and m.concurrency = n.concurrency and m.night_index = n.{{ baseline_index }}
    where {{ where }}
{%- endmacro %}

{#- z with P(Z > z) = p for a standard normal Z, 0 < p <= 0.5 (Abramowitz & Stegun 26.2.23,
    absolute error < 4.5e-4): DuckDB has no inverse normal CDF. -#}
{% macro normal_upper_quantile(p) -%}
    (
        sqrt(-2 * ln({{ p }}))
        - (2.515517 + 0.802853 * sqrt(-2 * ln({{ p }})) + 0.010328 * (-2 * ln({{ p }})))
        / (1 + 1.432788 * sqrt(-2 * ln({{ p }})) + 0.189269 * (-2 * ln({{ p }}))
            + 0.001308 * pow(sqrt(-2 * ln({{ p }})), 3))
    )
{%- endmacro %}

{#- What differs between two int_run_context rows (`now`, `before`: aliases), as the words a
    person reads: 'engine_version 0.11.2 → 0.12.0; server restarted'. Only facts known on
    both nights count (an unknown is no change); NULL when nothing differs. -#}
{% macro what_else_changed(now, before) -%}
    nullif(concat_ws('; ',
        {%- for column in ['engine', 'engine_version', 'model_id'] %}
        case when {{ now }}.{{ column }} <> {{ before }}.{{ column }}
            then '{{ column }} ' || {{ before }}.{{ column }} || ' → ' || {{ now }}.{{ column }} end,
        {%- endfor %}
        case when {{ now }}.server_started_at <> {{ before }}.server_started_at
            then 'server restarted' end,
        case when {{ now }}.settings_hash <> {{ before }}.settings_hash
            then 'settings ' || left({{ before }}.settings_hash, 8) || ' → '
                || left({{ now }}.settings_hash, 8) end,
        case when {{ now }}.sparkcap_version <> {{ before }}.sparkcap_version
            then 'sparkcap ' || {{ before }}.sparkcap_version || ' → '
                || {{ now }}.sparkcap_version end,
        case when {{ now }}.judgement_settings <> {{ before }}.judgement_settings
            then 'judgement settings changed' end,
        case when {{ now }}.client_host <> {{ before }}.client_host
            then 'client_host ' || {{ before }}.client_host || ' → ' || {{ now }}.client_host end
    ), '')
{%- endmacro %}
