"""Per-level summary of a run, read back from the warehouse (what is stored is what is shown).

This is the quick table ``sparkcap sweep`` prints. It applies the study's definitions to the
raw rows; the dbt marts are the system of record for capacity numbers and carry the full
validity rules and intervals.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparkcap.warehouse import open_warehouse

THRESHOLD_TOK_S = 20.0

LEVELS_SQL = """
with req as (
    select
        w.deployment, w.workload, w.concurrency, w.trial, w.wave_id,
        coalesce(w.client_saturated, false) as client_saturated,
        coalesce(w.queued, false) as queued,
        r.status,
        case
            when r.status = 'ok' and r.completion_tokens >= 2
                 and r.last_token_ns > r.first_token_ns
            then (r.completion_tokens - 1) / ((r.last_token_ns - r.first_token_ns) / 1e9)
        end as decode_tok_s,
        (r.first_token_ns - r.sent_ns) / 1e9 as ttft_s
    from raw.waves w
    join raw.requests r on r.wave_id = w.wave_id
    where w.run_id = $run_id and w.probe is null  -- probes have their own marts
      and w.superseded_reason is null  -- a re-measured wave is replaced by its last attempt
),
trials as (
    select
        deployment, workload, concurrency, trial,
        median(decode_tok_s) as median_tok_s,
        min(decode_tok_s) as min_tok_s,
        median(ttft_s) as median_ttft_s,
        count(*) filter (where status <> 'ok') as failures,
        bool_or(client_saturated) as saturated,
        bool_or(queued) as queued
    from req
    group by all
),
counted as (
    select *, trial > 0 and failures = 0 and not saturated and not queued as is_valid
    from trials
),
final as (
    select
        deployment, workload, concurrency,
        count(*) filter (where trial > 0) as n_trials,
        count(*) filter (where is_valid) as n_valid_trials,
        median(median_tok_s) filter (where is_valid)
            as median_decode_tok_s,
        min(min_tok_s) filter (where is_valid)
            as min_decode_tok_s,
        median(median_ttft_s) filter (where trial > 0) as median_ttft_s,
        coalesce(sum(failures) filter (where trial > 0), 0) as failures,
        coalesce(bool_or(queued) filter (where trial > 0), false) as queued
    from counted
    group by all
)
select * from final order by deployment, workload, concurrency
"""


@dataclass(frozen=True, slots=True)
class LevelRow:
    deployment: str
    workload: str
    concurrency: int
    n_trials: int
    n_valid_trials: int
    median_decode_tok_s: float | None
    min_decode_tok_s: float | None
    median_ttft_s: float | None
    failures: int
    queued: bool


def level_rows(db_path: Path, run_id: str) -> list[LevelRow]:
    with open_warehouse(db_path, read_only=True) as con:
        rows = con.execute(LEVELS_SQL, {"run_id": run_id}).fetchall()
    return [LevelRow(*r) for r in rows]


def capacity(rows: list[LevelRow], threshold: float = THRESHOLD_TOK_S) -> int | None:
    """Largest tested level whose median passes with every smaller level passing too.

    A level where the server queued streams cannot pass: its rate describes fewer streams
    than were asked for.
    """
    cap: int | None = None
    for r in sorted(rows, key=lambda r: r.concurrency):
        if r.median_decode_tok_s is None or r.median_decode_tok_s < threshold or r.queued:
            break
        cap = r.concurrency
    return cap
