"""Hot-path records of what one wave measured.

Chunks are stored column-wise in ``array`` buffers (one machine word per value) rather than
as one object per chunk: a 16-stream wave of 1000-token outputs makes tens of thousands of
chunks, and the per-chunk cost on the event loop is what limits how many streams one client
can time honestly.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from enum import StrEnum


class Status(StrEnum):
    OK = "ok"
    SHORT = "short"
    TRUNCATED = "truncated"
    SERVER_ERROR = "server_error"
    REJECTED = "rejected"
    TIMEOUT = "timeout"
    PROTOCOL_ERROR = "protocol_error"


class CountSource(StrEnum):
    USAGE = "usage"
    CONTINUOUS_USAGE = "continuous_usage"
    NONE = "none"
    # the server's usage held an impossible value (``error`` says which): none of its counts
    # is kept, and the stream is judged as one without a count
    INVALID_USAGE = "invalid_usage"


NO_TOKENS = -1  # sentinel in ChunkColumns.n_tokens for "server gave no per-chunk count"
# the token columns of the raw warehouse are int32: no count a server sends may exceed this
MAX_COUNT = (1 << 31) - 1


@dataclass(slots=True)
class ChunkColumns:
    """One request's content chunks: arrival offsets (ns from the wave anchor) and sizes."""

    t_ns: array[int] = field(default_factory=lambda: array("q"))
    n_tokens: array[int] = field(default_factory=lambda: array("q"))
    n_chars: array[int] = field(default_factory=lambda: array("q"))

    def append(self, t_ns: int, n_tokens: int, n_chars: int) -> None:
        self.t_ns.append(t_ns)
        self.n_tokens.append(n_tokens)
        self.n_chars.append(n_chars)

    def __len__(self) -> int:
        return len(self.t_ns)


@dataclass(slots=True)
class RequestRecord:
    """Everything sparkcap learned about one stream; times are ns offsets from the wave anchor."""

    request_id: str
    stream_index: int
    prompt_id: str
    requested_tokens: int
    required_tokens: int | None
    temperature: float
    sent_ns: int | None = None
    headers_ns: int | None = None
    first_token_ns: int | None = None
    last_token_ns: int | None = None
    # the stamp is the kernel's receive time of bytes that held this event alone (arrivals.py):
    # no stall of the client can have moved it
    first_token_exact: bool = False
    last_token_exact: bool = False
    end_ns: int | None = None
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    cached_prompt_tokens: int | None = None
    count_source: CountSource = CountSource.NONE
    finish_reason: str | None = None
    status: Status = Status.TRUNCATED
    http_status: int | None = None
    error: str | None = None
    retry_after: str | None = None
    saw_done: bool = False
    role: str | None = None  # probes: background, long, probe, cold, warm, control, code, prose
    # the most tokens the request as sent allowed (its body's max_tokens, extra_body included):
    # a completion count above it cannot be true (never stored: requested_tokens is)
    token_ceiling: int | None = None
    # the output length a shortened (or lengthened) stream stands in for; None: its own
    full_tokens: int | None = None
    # agent sessions: which session of the wave sent this turn, and which turn it was (from 0)
    session_id: str | None = None
    turn_index: int | None = None
    # open-loop replay: when the arrival process scheduled this request (ns from the anchor);
    # sent_ns later than it is the client's lateness, and TTFT is read from here
    scheduled_ns: int | None = None
    # a thinking model's reasoning: when the first answer token arrived (content or a tool
    # call; first_token_ns is the first on any channel), the reasoning characters streamed, the
    # reasoning tokens usage counted, and whether the answer's text held a <think> tag
    first_answer_ns: int | None = None
    reasoning_chars: int = 0
    reasoning_tokens: int | None = None
    think_tag: bool = False
    # open-loop replay: the most the client's loop stalls can have moved this stream's rate, a
    # share (wave.stream_timing_error); None where not computed (a sweep's wave has its own)
    timing_error_bound: float | None = None
    chunks: ChunkColumns = field(default_factory=ChunkColumns)

    @property
    def n_chunks(self) -> int:
        return len(self.chunks)


def is_count(value: object) -> bool:
    """A token count a warehouse column can hold: an int (``true`` is not one), in range."""
    return type(value) is int and 0 <= value <= MAX_COUNT


def stored_counts(rec: RequestRecord) -> tuple[int | None, int | None, int | None, str, str | None]:
    """(completion, prompt, cached, count_source, error) as the int32 columns may hold them.

    The stream's own parser already refuses impossible counts (client.py); a record made any
    other way (a probe, a test, an older spool) is checked again where it is stored, because
    Arrow refuses an out-of-range value (the whole wave is lost) and numpy wraps it.
    """
    values = (rec.completion_tokens, rec.prompt_tokens, rec.cached_prompt_tokens)
    if all(v is None or is_count(v) for v in values):
        return (*values, str(rec.count_source), rec.error)
    why = "usage ignored: a count outside 0..2^31-1"
    error = why if rec.error is None else f"{rec.error}; {why}"
    return None, None, None, CountSource.INVALID_USAGE.value, error


@dataclass(slots=True, frozen=True)
class ReplayOffer:
    """What an open-loop replay was asked to send: stored beside what it observed, so the
    verdict can name the load it held or failed at."""

    rate_factor: float
    duration_s: float
    seed: int
    planned_streams: float
    code_per_s: float
    prose_per_s: float
    long_per_min: float
    long_prompt_tokens: int
    client_stall_s: float
    client_stall_at_s: float
    # the plan's prefill budget: decode below the threshold beside long prefills at most this
    # share of the time (None: no plan gave one, and the replay checks none)
    max_below_threshold_share: float | None = None
    # the one `sparkcap replay` this deployment's replay was part of (None: a replay alone)
    replay_id: str | None = None
    # which plan the rates came from: 'rate' (open-loop capacity, fct_plan_rates) or 'burst'
    # (the burst plan's streams by Little's law); None: stored before plans had kinds
    plan_kind: str | None = None
    # the `sparkcap replay --search` this replay was a step of (None: not a search)
    search_id: str | None = None
    # why this planned deployment's replay never ran (None: it ran); its wave has no requests
    not_replayed_reason: str | None = None


@dataclass(slots=True)
class ProcessTiming:
    """How one load-generating process ran its share of a wave (times: ns from the anchor)."""

    process_index: int
    pid: int
    n_streams: int
    released_ns: int  # when this process opened its gate
    ended_ns: int  # when its last stream ended
    loop_lag_p99_ms: float | None
    loop_lag_max_ms: float | None
    cpu_pct: float | None  # of one core, over the process's share of the wave
    timing_error_bound: float | None  # over this process's streams (see wave.py)


@dataclass(slots=True)
class SearchDecision:
    """What the live search decided after a level's last wave (or a sustain wave), and why.

    A record of what the driver did, kept beside the waves it measured; the verdict of record
    is dbt's (``fct_search_path``), computed by the same SQL from the staged waves.
    """

    kind: str  # level | sustain
    search_step: int
    concurrency: int
    n_trials: int  # counted trials run at this level (valid or not)
    n_valid_trials: int  # of them, those the live figures could use
    confidence: float
    trials_max: int
    median_tok_s: float | None  # live figures (labelled live wherever shown)
    ci_low_tok_s: float | None
    ci_high_tok_s: float | None
    verdict: str  # pass | fail | straddles (levels); pass | fail (sustain)
    stop_reason: str
    next_action: str


@dataclass(slots=True)
class PowerSample:
    """One reading of one power sensor during a wave (loadgen/power.py).

    ``quantity`` is ``power_w`` (an instantaneous draw) or ``energy_j`` (a cumulative counter,
    converted to joules); an ``unavailable`` reading has no value and says why, so a sensor
    that reads N/A is never taken for one that reads 0.
    """

    seq: int  # the sampling round within the wave (a round reads every sensor once)
    t_ns: int  # ns from the wave's anchor, like chunks: the middle of the read's round trip
    source: str  # dcgm | node-exporter | nvml
    sensor: str | None  # e.g. gpu=0, or the RAPL zone; None when the whole round failed
    metric: str | None  # the series read
    quantity: str | None  # power_w | energy_j
    value: float | None
    status: str  # ok | unavailable
    reason: str | None = None
    # the round trip of the read that gave it: the source read its sensor somewhere inside
    # it, so t_ns stands for an instant known to within half of it either way
    read_rtt_ns: int | None = None


@dataclass(slots=True)
class WaveRecord:
    """One synchronized wave: every stream released together, measured against one anchor."""

    wave_id: str
    run_id: str
    deployment: str
    model: str
    endpoint: str
    workload: str
    concurrency: int
    trial: int  # 0 = warm-up, never counted
    started_at_ns: int  # wall-clock anchor, ns since the epoch
    anchor_perf_ns: int  # perf_counter_ns at the same instant
    requests: list[RequestRecord] = field(default_factory=list)
    start_skew_ms: float | None = None
    loop_lag_p99_ms: float | None = None
    loop_lag_max_ms: float | None = None
    client_cpu_pct: float | None = None  # the busiest process's, % of one core
    # every process that ran a share of the wave (one when the wave ran in-process)
    client_processes: list[ProcessTiming] = field(default_factory=list)
    # largest relative rate error loop stalls near first/last tokens can explain (wave.py)
    timing_error_bound: float | None = None
    attempt: int = 1  # > 1: this wave re-measures one the client spoiled
    superseded_reason: str | None = None  # set when a later attempt replaces this wave
    duration_s: float | None = None
    # (phase, name, labels, value) from the server's /metrics around the wave
    server_metrics: list[tuple[str, str, dict[str, str], float]] = field(default_factory=list)
    metrics_error: str | None = None  # why a scrape around this wave failed
    probe: str | None = None  # the probe that made this wave; None for sweep waves
    method: str = "grid"  # grid | search: how the sweep chose its levels
    search_step: int | None = None  # the level's place in a search (sustain waves too)
    # each stream's length as a share of its full output length (a search's shortened trial:
    # dbt judges it by the rate its full-length stream would read)
    length_factor: float = 1.0
    # what the server's prefix cache was told before the wave: "reset" (it answered the reset
    # route), "unsupported" (no such route), "failed: ..." or None (no reset was asked)
    cache_reset: str | None = None
    search_decision: SearchDecision | None = None  # on the wave after which it was made
    # why dbt's client-spoiled rule (compiled, handed to the sweep) distrusts this wave, for
    # live decisions only; never stored: dbt's int_trial_validity judges the stored waves
    client_spoiled_live: str | None = None
    # the deployment's power source read while the wave ran (none named: empty)
    power_samples: list[PowerSample] = field(default_factory=list)
    # an open-loop replay's offer (the arrival rates it was asked for); None for other waves
    replay_offer: ReplayOffer | None = None
