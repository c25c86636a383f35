"""What a sweep runs: a grid of concurrency levels or an adaptive search, its trials and
lengths, and the tolerances a wave is judged by."""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, Field, field_validator, model_validator

from sparkcap.config.base import MAX_TOKENS, Strict, WorkloadName
from sparkcap.config.deployment import Deployment
from sparkcap.config.sessions import SessionShape


def _tolerance(default: float, dbt_var: str, deprecated_name: str) -> Any:
    """A client-timing tolerance: a share (0 < it < 1), named as the dbt var it fills, still
    read under the name it had before."""
    return Field(
        default,
        gt=0,
        lt=1,
        validation_alias=AliasChoices(dbt_var, deprecated_name),
        description=f"dbt var {dbt_var} (deprecated name: {deprecated_name})",
    )


class SearchPlan(Strict):
    """An adaptive search for the largest integer concurrency that passes (``--search``).

    Doubling from 1 until a level fails, then bisection; each level gets counted trials until
    the bootstrap interval of its median clears the threshold at ``confidence`` or
    ``trials_max`` is reached (the level then *straddles* it and the answer is an interval).
    A sustain wave at the found capacity, ``sustain_factor`` times the full output length
    (4x a default trial), confirms it; one that falls moves the answer down and says so.
    """

    max_level: int = Field(32, ge=1, le=4096, description="highest concurrency tried")
    trials_max: int = Field(3, ge=1, le=10)
    confidence: float = Field(0.9, gt=0.5, lt=1)
    # A trial's length: ``trial_share`` of each stream's output length (at least
    # ``min_trial_tokens``), or ``trial_tokens`` exactly. Every token is timestamped, so a
    # quarter-length stream measures its rate as well as a full one; where a longer context
    # slows decoding, the sustain wave (``sustain_factor`` x the full length) catches it.
    trial_share: float = Field(0.25, gt=0, le=1)
    min_trial_tokens: int = Field(32, ge=2, le=MAX_TOKENS)
    trial_tokens: int | None = Field(None, ge=2, le=MAX_TOKENS)
    # a warm-up only settles the server's batch shape, so it is short
    warmup_tokens: int = Field(32, ge=2, le=MAX_TOKENS)
    # the sustain wave's length as a multiple of each stream's full output length: the default
    # holds the answer at the length users ask for (4x a trial); 0: no sustain wave
    sustain_factor: float = Field(1.0, ge=0, le=20)
    # a failed sustain wave moves the answer down one level and sustains again, this often
    sustain_retries: int = Field(2, ge=0, le=8)
    # Bisection trusts a monotone curve; padded batches can dip below it. After bisection the
    # search tests levels below its answer that it skipped: the first padded level after each
    # declared batch bucket (a deployment's ``batch_buckets``), else this many levels, each the
    # middle of the widest untested gap below the answer (0: no check). A level that fails
    # makes the curve non-monotone; the capacity is then the largest level every tested level
    # up to which passes, and the report flags it.
    dip_check_levels: int = Field(2, ge=0, le=16)


class SweepPlan(Strict):
    levels: tuple[int, ...] = (1, 2, 4, 8, 16)
    trials: int = Field(3, ge=1, le=5)
    warmup: bool = True
    max_tokens: int | None = Field(
        None, ge=2, le=MAX_TOKENS, description="override the workload's length"
    )
    # A wave the *client* spoiled (its own stalls or a ragged release) says nothing about the
    # server, so it is measured again, at most this many extra times; the spoiled wave stays in
    # raw, marked superseded. Server-side failures are findings and are never re-run.
    max_remeasures: int = Field(2, ge=0, le=5)
    # The tolerances dbt judges a wave's client timing with, named as dbt's vars (a unit test
    # keeps these defaults equal to the project's): the largest relative rate error loop
    # stalls may cause (the wave's timing_error_bound), and start skew as a share of the median
    # stream's decode span. A night fills them from dbt's vars as this environment sets them
    # (SPARKCAP_DBT_VARS), so the plan recorded with a run says what its waves were judged by.
    # The names timing_tolerance and skew_tolerance are deprecated: still read (a fleet file,
    # a run recorded before the rename), never written.
    timing_error_tolerance: float = _tolerance(0.005, "timing_error_tolerance", "timing_tolerance")
    start_skew_tolerance: float = _tolerance(0.05, "start_skew_tolerance", "skew_tolerance")
    # Load-generating processes a wave is spread over (None: one per core this process may
    # use). 1 runs every stream on the sweep's own event loop. See loadgen/procs.py.
    client_processes: int | None = Field(None, ge=1, le=256)
    # A wave is spread only as far as this many streams per process: below it, releasing
    # from several processes costs more start skew (a process not scheduled at the instant)
    # than one loop's stamping of a few streams loses.
    min_streams_per_process: int = Field(16, ge=1, le=4096)
    # set: the levels are searched (see SearchPlan) instead of swept as a grid
    search: SearchPlan | None = None
    # the agent workload's sessions (its levels count sessions); ignored by code and prose
    sessions: SessionShape = Field(default_factory=lambda: SessionShape())

    @field_validator("levels", mode="before")
    @classmethod
    def _parse_levels(cls, v: Any) -> Any:
        if isinstance(v, str):
            try:
                return tuple(int(x) for x in v.split(",") if x.strip())
            except ValueError as exc:
                raise ValueError(f"levels must be comma-separated integers, got {v!r}") from exc
        return v

    @model_validator(mode="after")
    def _check_levels(self) -> SweepPlan:
        if not self.levels:
            raise ValueError("at least one concurrency level is needed")
        bad = [lv for lv in self.levels if lv < 1 or lv > 4096]
        if bad:
            raise ValueError(f"concurrency levels must be between 1 and 4096, got {bad}")
        if len(set(self.levels)) != len(self.levels):
            raise ValueError("concurrency levels must be distinct")
        object.__setattr__(self, "levels", tuple(sorted(self.levels)))
        return self


class SweepRequest(Strict):
    """One deployment × workload sweep, as the CLI and the flows ask for it."""

    deployment: Deployment
    workload: WorkloadName
    plan: SweepPlan = Field(default_factory=lambda: SweepPlan())
    seed: int = 0


def planned_wave_count(plan: SweepPlan) -> int:
    """Waves a plan runs: exact for a grid; for a search an estimate (doubling to the top,
    three bisection steps, warm-up + two trials a level, one sustain wave) for progress bars."""
    if plan.search is None:
        return len(plan.levels) * (plan.trials + (1 if plan.warmup else 0))
    doubling = max(1, plan.search.max_level).bit_length() + 1
    per_level = 2 + (1 if plan.warmup else 0)
    return (doubling + 3) * per_level + (1 if plan.search.sustain_factor > 0 else 0)
