"""Hand-made marts for the readers' unit tests: the tables as dbt builds them, typed as its
models type them (a DECIMAL threshold, HUGEINT sums), so a reader's casts are tested too."""

from __future__ import annotations

# marts.fct_levels and marts.fct_capacity, empty: a test inserts its own rows
LEVELS_AND_CAPACITY = """
create table marts.fct_levels (run_id varchar, deployment varchar, workload varchar,
    concurrency integer, n_trials bigint, n_valid_trials bigint, n_failed_streams hugeint,
    median_decode_tok_s double, min_decode_tok_s double, median_ttft_s double,
    ttft_quantile double, ttft_quantile_s double, ttft_ceiling_s double,
    meets_ttft_ceiling boolean, ttft_quantile_samples integer,
    ttft_quantile_min_samples integer, ttft_quantile_is_supported boolean, any_queued boolean);
create table marts.fct_capacity (run_id varchar, deployment varchar, workload varchar,
    method varchar, threshold_tok_s decimal(3, 1), capacity_streams integer,
    level_capacity_streams integer, first_failing_level integer, capacity_interpolated integer,
    is_lower_bound boolean, is_below_lowest_level boolean, is_measured boolean,
    search_low_streams integer, search_high_streams integer, n_straddling_levels bigint,
    sustain_result varchar, n_valid_trials integer, capacity_verdict varchar);
"""
