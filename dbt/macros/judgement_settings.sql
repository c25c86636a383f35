{#
  Every var a judgement depends on, with the value this build uses, as one SQL string
  (e.g. 'threshold_tok_s=20; bootstrap_samples=200; ...'). Incremental models store it on their
  rows, and changed_runs_filter rebuilds any run built with other settings: a changed
  threshold or `sparkcap build --var` reaches every night already built, and history never
  mixes settings silently. A unit test keeps this list equal to dbt_project.yml's vars.
#}
{% macro judgement_var_names() -%}
    {{ return([
        'threshold_tok_s', 'bootstrap_samples', 'bootstrap_seed', 'ci_low_pct', 'ci_high_pct',
        'timing_error_tolerance', 'start_skew_tolerance', 'queued_ttft_factor',
        'queued_ttft_min_s', 'overlap_stamp_slack_ms', 'probe_window_s', 'probe_step_s', 'dip_share',
        'search_min_samples', 'bound_above_tolerance', 'bound_far_below_share',
        'bandwidth_bound_share', 'kv_full_usage', 'prefill_phase_share',
        'tier_thresholds_tok_s', 'tier_ttft_p90_ceilings_s',
        'change_baseline_runs', 'change_min_baseline_runs', 'change_false_alarm_rate',
        'change_min_effect_pct', 'change_permutations', 'drift_window_runs',
        'drift_min_pct_per_run', 'ttft_ceiling_s', 'ttft_quantile', 'tail_confidence',
        'replay_max_send_lag_s', 'replay_max_late_share', 'replay_warmup_share',
        'cache_hit_min_share',
        'cold_cached_max_share', 'energy_max_sensor_w',
        'open_loop_rate_step_pct', 'open_loop_grid_points', 'open_loop_max_in_flight',
        'think_time_s', 'replay_climb_share', 'replay_climb_min_streams',
        'replay_prediction_tolerance'
    ]) }}
{%- endmacro %}

{#- The version of the rules themselves, beside the vars: bumped whenever a model changes a
    judgement (0.4: queueing and concurrency derived from token times; probe waves judged by
    int_trials; 5: search levels and sustain waves; 6: a level without a valid trial is no
    measured failure, int_capacity.unmeasured_level; 7: one bootstrap for every level
    interval, the search's, so int_level_bootstrap's samples and the capacity interval drawn
    from them changed; 8: a search's shortened trial judged as its full-length stream
    (level_decode_tok_s), a sustain wave that fell clearly decides the high end; 9: the
    bootstrap hashes one text per pick, since DuckDB's hash of integers differing in the last
    gave complementary low bits and 2-trial intervals picked one trial twice, and
    gap-attribution waves get int_trials' verdicts; 10: agent sessions, a level held to its
    turns' TTFT ceiling and int_trials not calling a session's sequential turns queued; 11: a
    context-ladder rung whose cold prompt was served from the cache is not counted as cold; 12:
    a wave's energy counts every sensor once, by its own counter or draw, and a counter that
    did not move or a draw past energy_max_sensor_w is no energy; a server's value past 2^53
    or a series listed twice with two values is no reading; 13: queued by overlap counts a
    decode window only beyond its stamps' slack (a stream whose content came at one instant,
    and a hand-off whose stamps cross by less than the loop's lag, are no overlap), and a
    wave's energy readings must hold its streams' lives), so nights built by an older
    sparkcap are rebuilt once by the new rules. -#}
{% macro rules_version() -%}13{%- endmacro %}

{#- A scalar var renders as a float ('threshold_tok_s=20.0' whether 20 or 20.0 was given, as
    nights already built stored it); a list var (the capacity tiers) as its sorted floats
    joined by '/' ('tier_thresholds_tok_s=10.0/20.0/30.0/50.0'): order and int-or-float
    change no tier, so they rebuild nothing. -#}
{% macro judgement_var_text(value) -%}
    {%- if value is iterable and value is not string and value is not mapping -%}
        {%- set items = [] -%}
        {%- for item in value -%}{%- do items.append(item | float) -%}{%- endfor -%}
        {{- items | sort | join('/') -}}
    {%- else -%}
        {{- value | float -}}
    {%- endif -%}
{%- endmacro %}

{% macro judgement_settings() -%}
    {%- set parts = ['rules=' ~ rules_version()] -%}
    {%- for name in judgement_var_names() -%}
        {%- do parts.append(name ~ '=' ~ judgement_var_text(var(name))) -%}
    {%- endfor -%}
    '{{ parts | join("; ") }}'
{%- endmacro %}
