"""What a person watching a night sees while it runs.

One line per deployment × workload: waves done of planned, the level in flight, the last
wave's median stream rate as the client read it ("wave median"), a search level's median as
the live judge decided it ("live median", the number stored as ``live_median_tok_s``) and, on
a terminal, the time left. Each number has its own name; the numbers of record come from the
marts once the night is built. Off a terminal (CI, cron, Prefect workers) the same news comes
as plain timestamped lines.

Updates happen between waves, after a wave's last stream has ended, never inside the
interval a wave times; and the loop lag they could add to a parallel deployment's wave is
measured like any other (``raw.waves.timing_error_bound``).

The Prefect flow runs the sweep inside its own task; :func:`emit` lets the CLI that started
the flow in-process watch it too (``add_sink``), without the flow knowing about terminals.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)

from sparkcap.config.plan import planned_wave_count
from sparkcap.loadgen.records import RequestRecord, Status, WaveRecord
from sparkcap.publish.text.console import text_console

ProgressFn = Callable[[WaveRecord, int, int], None]
_sinks: list[ProgressFn] = []
_lock = threading.Lock()


def add_sink(fn: ProgressFn) -> None:
    with _lock:
        _sinks.append(fn)


def remove_sink(fn: ProgressFn) -> None:
    with _lock:
        if fn in _sinks:
            _sinks.remove(fn)


def emit(wave: WaveRecord, done: int, total: int) -> None:
    """Tell every registered watcher (a CLI that started the flow) about a finished wave."""
    with _lock:
        sinks = list(_sinks)
    for fn in sinks:
        fn(wave, done, total)


def note(text: str) -> None:
    """A line for every watcher that prints lines (a distributed night's children: started on
    a host, finished, lost), where no wave of this process can be shown."""
    with _lock:
        sinks = list(_sinks)
    for fn in sinks:
        line = getattr(fn, "line", None)
        if line is not None:
            line(text)


def live_decode_tok_s(r: RequestRecord) -> float | None:
    """A stream's rate as the client read it, for a progress line, before anything is staged:
    the study's formula on the client's own stamps (dbt's is macro ``stream_decode_tok_s``).

    Exempt from "compile dbt's macro" because it is display only: never stored, never judged,
    shown as "wave median" beside the judge's compiled number wherever that exists. A grid
    night has no judge, and compiling dbt (seconds) and running DuckDB between waves for a
    progress line would cost a night more than the line is worth. The number of record is
    ``int_stream_rates.decode_tok_s``; tests hold this figure to it."""
    if r.status is not Status.OK or r.completion_tokens is None or r.completion_tokens < 2:
        return None
    if r.first_token_ns is None or r.last_token_ns is None or r.last_token_ns <= r.first_token_ns:
        return None
    return (r.completion_tokens - 1) / ((r.last_token_ns - r.first_token_ns) / 1e9)


def live_ttft_s(r: RequestRecord) -> float | None:
    """Time to first token for a live line, display only as :func:`live_decode_tok_s` is (the
    number of record: ``int_stream_rates.ttft_s``, macro ``ttft_seconds``)."""
    if r.first_token_ns is None or r.sent_ns is None:
        return None
    return (r.first_token_ns - r.sent_ns) / 1e9


def probe_lines(waves: Sequence[WaveRecord]) -> list[str]:
    """A probe's own requests in its first wave (not the background or mixed-load streams),
    as the client saw them: when each was sent, its live TTFT, its prompt and cached tokens."""
    lines = []
    for r in [r for w in waves[:1] for r in w.requests]:
        if r.role in ("background", "code", "prose"):
            continue
        ttft_s = live_ttft_s(r)
        ttft = "—" if ttft_s is None else f"{ttft_s:.2f} s"
        lines.append(
            f"{r.role:8} sent {(r.sent_ns or 0) / 1e9:6.2f} s  live TTFT {ttft:>9}  prompt "
            f"{r.prompt_tokens} tok, cached {r.cached_prompt_tokens}  {r.status.value}"
        )
    return lines


def client_median_tok_s(wave: WaveRecord) -> float | None:
    """The wave's median stream rate as the client read it ("wave median"): a progress
    figure only, never the judge's level median (``live_median_tok_s``)."""
    rates = sorted(x for x in map(live_decode_tok_s, wave.requests) if x is not None)
    if not rates:
        return None
    mid = len(rates) // 2
    return rates[mid] if len(rates) % 2 else (rates[mid - 1] + rates[mid]) / 2


# what the live display's bar, counts and time left take of a line (see NightProgress)
LIVE_COLUMNS_TAKEN = 28


def wave_summary(wave: WaveRecord, short: bool = False) -> str:
    """A wave's progress text; ``short`` for a narrow live line (``c=16 t3 16/16 ok 3.3 tok/s``,
    the client's median; ``live 3.2 tok/s`` where the search decided its level after this wave:
    the judge's)."""
    ok = sum(1 for r in wave.requests if r.status is Status.OK)
    med = client_median_tok_s(wave)
    decision = wave.search_decision
    judged = decision.median_tok_s if decision is not None else None
    if short:
        label = "warm-up" if wave.trial == 0 else f"t{wave.trial}"
        rate = (
            f" live {judged:.1f} tok/s"
            if judged is not None
            else (f" {med:.1f} tok/s" if med is not None else "")
        )
        return (
            f"c={wave.concurrency} {label} {ok}/{len(wave.requests)} ok"
            + rate
            + (" superseded" if wave.superseded_reason else "")
        )
    label = "warm-up" if wave.trial == 0 else f"trial {wave.trial}"
    return (
        f"c={wave.concurrency} {label}: {ok}/{len(wave.requests)} ok"
        + (f", wave median {med:.1f} tok/s" if med is not None else "")
        + (
            f", live median {judged:.1f} tok/s ({decision.verdict})"
            if decision is not None and judged is not None
            else ""
        )
        + (f" [{wave.superseded_reason}]" if wave.superseded_reason else "")
    )


@dataclass
class _Pair:
    done: int
    planned: int | None
    task: TaskID | None = None


class NightProgress:
    """Per deployment × workload progress; ``planned`` maps (deployment, workload) to the
    number of waves planned (re-measured waves do not count as progress)."""

    def __init__(
        self,
        planned: dict[tuple[str, str], int] | None = None,
        *,
        console: Console | None = None,
        stream: TextIO | None = None,
        live: bool | None = None,
    ) -> None:
        self.console = console or text_console(stderr=True)
        self.stream = stream
        self.live = self.console.is_terminal if live is None else live
        self.pairs: dict[tuple[str, str], _Pair] = {
            k: _Pair(0, n) for k, n in (planned or {}).items()
        }
        self.progress: Progress | None = None

    def __enter__(self) -> NightProgress:
        if self.live:
            self.progress = Progress(
                TextColumn("{task.description}", markup=False),
                BarColumn(bar_width=8),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                TextColumn("left"),
                console=self.console,
            )
            self.progress.start()
            for key, pair in self.pairs.items():
                pair.task = self.progress.add_task(f"{key[0]}/{key[1]} waiting", total=pair.planned)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def line(self, text: str) -> None:
        """A plain line (e.g. the night's first), above the live display on a terminal."""
        if self.stream is not None:
            print(text, file=self.stream, flush=True)
        else:
            self.console.print(text, highlight=False, markup=False, soft_wrap=True)

    def __call__(self, wave: WaveRecord, done: int, total: int) -> None:
        key = (wave.deployment, wave.workload)
        pair = self.pairs.setdefault(key, _Pair(0, None))
        if wave.superseded_reason is None:
            pair.done += 1
        # a search's plan is an estimate (config.planned_wave_count): never show 30/25
        pair.planned = max(pair.planned, pair.done) if pair.planned else pair.planned
        of = f"{pair.done}/{pair.planned}" if pair.planned else f"{pair.done}"
        text = f"{wave.deployment}/{wave.workload} {wave_summary(wave)}"
        if self.progress is not None:
            # the bar, the counts and the time left take ~28 columns: the wave's text gives
            # way (a shorter wording first, then cut), never the time left
            room = max(16, self.console.width - LIVE_COLUMNS_TAKEN)
            if len(text) > room:
                text = f"{wave.deployment}/{wave.workload} {wave_summary(wave, short=True)}"
            text = text if len(text) <= room else text[: room - 1] + "…"
            if pair.task is None:
                pair.task = self.progress.add_task("", total=pair.planned)
            self.progress.update(
                pair.task, completed=pair.done, total=pair.planned, description=text
            )
        else:
            stamp = datetime.now().strftime("%H:%M:%S")
            self.line(f"{stamp} [{of} waves] {text}")


def planned_waves(requests: Iterable[Any]) -> dict[tuple[str, str], int]:
    """Waves planned per (deployment, workload) for SweepRequests."""
    out: dict[tuple[str, str], int] = {}
    for r in requests:
        key = (r.deployment.name, r.workload)
        out[key] = out.get(key, 0) + planned_wave_count(r.plan)
    return out
