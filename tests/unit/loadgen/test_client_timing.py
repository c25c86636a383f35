"""The timing-error bound a wave records, and the re-measure decision made from it (the rule
is dbt's client_spoiled: its verdicts are dbt unit tests of int_trial_validity)."""

from __future__ import annotations

import asyncio
import json
from array import array
from pathlib import Path

import pytest
import yaml

from sparkcap.config.deployment import Deployment
from sparkcap.config.plan import SweepPlan
from sparkcap.loadgen import sweep
from sparkcap.loadgen.plan import WavePlanItem
from sparkcap.loadgen.records import RequestRecord, Status, WaveRecord
from sparkcap.loadgen.sweep import worth_remeasuring
from sparkcap.loadgen.wave import LoopMonitor, timing_error_bound
from tests.paths import ROOT
from tests.support.waves import wave_record

MS = 1_000_000


def monitor(samples: list[tuple[int, int]]) -> LoopMonitor:
    """A monitor with (woke at ms, lag ms) samples, as the sampler would have left them."""
    m = LoopMonitor(interval_s=0.01)
    m.woke_ns = array("q", [w * MS for w, _ in samples])
    m.lag_ns = array("q", [lag * MS for _, lag in samples])
    return m


def stream(i: int, first_ms: int, last_ms: int, status: Status = Status.OK) -> RequestRecord:
    r = RequestRecord(f"w/s{i}", i, f"p{i}", 100, 100, 0.0)
    r.first_token_ns, r.last_token_ns, r.status = first_ms * MS, last_ms * MS, status
    r.sent_ns = 0
    return r


def wave(requests: list[RequestRecord], trial: int = 1) -> WaveRecord:
    w = wave_record(len(requests), trial, wave_id="w")
    w.requests = requests
    return w


def test_a_stall_at_a_first_token_bounds_the_rate_error() -> None:
    # an 80 ms stall ends at 1 s, when stream 1's first token is read; its span is 2 s
    m = monitor([(990, 0), (1080, 80), (1090, 0), (2990, 1), (3000, 0)])
    bound = timing_error_bound([stream(0, 500, 2500), stream(1, 1080, 3080)], m, anchor_ns=0)
    assert bound == (80 + 0) * MS / (2000 * MS)  # 4 %: only stream 1's first token is late


def test_a_kernel_stamp_of_an_event_alone_is_late_by_no_stall() -> None:
    # the same 80 ms stall, but stream 1's first token carries the kernel's arrival time of
    # bytes that held it alone (arrivals.py): the stall delayed reading it, not its stamp
    m = monitor([(990, 0), (1080, 80), (1090, 0), (2990, 1), (3000, 0)])
    exact = stream(1, 1080, 3080)
    exact.first_token_exact = True
    assert timing_error_bound([stream(0, 500, 2500), exact], m, anchor_ns=0) == 0.0
    exact.last_token_exact = True
    exact.first_token_exact = False  # the last one alone does not cover the first
    assert timing_error_bound([exact], m, anchor_ns=0) == 80 * MS / (2000 * MS)


def test_a_stall_in_the_middle_of_the_streams_moves_no_rate() -> None:
    m = monitor([(1500, 60), (1510, 0)])
    assert timing_error_bound([stream(0, 500, 2500)], m, anchor_ns=0) == 0.0


def test_failed_streams_and_empty_waves_give_no_bound() -> None:
    m = monitor([(500, 50)])
    assert timing_error_bound([stream(0, 500, 2500, Status.SHORT)], m, anchor_ns=0) is None
    assert timing_error_bound([], m, anchor_ns=0) is None


def test_a_long_stream_shrugs_off_the_stall_a_short_one_cannot() -> None:
    m = monitor([(1000, 50)])
    short = timing_error_bound([stream(0, 1000, 2300)], m, anchor_ns=0)
    long = timing_error_bound([stream(0, 1000, 51000)], m, anchor_ns=0)
    assert short is not None and short > 0.03  # 50 ms of a 1.3 s stream
    assert long is not None and long == 0.001  # 50 ms of a 50 s stream


def test_remeasure_what_the_handed_rule_calls_spoiled_in_its_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sweep re-measures a counted wave with every stream ok when the rule it was handed
    (dbt's client_spoiled, compiled by the night) calls it spoiled, in the rule's words; a
    warm-up, a wave with a failed stream, or a sweep handed no rule, never."""
    verdict = "client timing: error bound 0.60% > 0.50%"
    calls: list[str] = []

    def rule(w: WaveRecord) -> str | None:
        calls.append(w.wave_id)
        return verdict if w.attempt == 1 else None

    async def measured(
        client: object,
        dep: object,
        workload: str,
        plan: SweepPlan,
        run_id: str,
        item: WavePlanItem,
        attempt: int,
        *_: object,
    ) -> WaveRecord:
        ok = [stream(0, 500, 1500), stream(1, 500, 1500)]
        failed = [stream(0, 500, 1500), stream(1, 500, 900, Status.SHORT)]
        w = wave(failed if item.concurrency == 3 else ok, trial=item.trial)
        w.wave_id, w.attempt = f"c{item.concurrency}t{item.trial}a{attempt}", attempt
        return w

    monkeypatch.setattr(sweep, "_one_wave", measured)
    dep = Deployment(name="d", endpoint="http://127.0.0.1:9/v1", model="m")  # type: ignore[arg-type]

    def runner(client_rule: sweep.ClientRule | None) -> sweep.WaveRunner:
        return sweep.WaveRunner(
            None,  # type: ignore[arg-type]
            dep,
            "code",
            SweepPlan(max_remeasures=1),
            "r",
            on_wave=None,
            progress=None,
            before_wave=None,
            after_wave=None,
            planned=1,
            client_rule=client_rule,
        )

    judged = runner(rule)
    kept = asyncio.run(judged.measure(WavePlanItem(2, 1)))
    first, last = judged.waves
    assert first.superseded_reason == f"re-measured (attempt 2): {verdict}"
    assert first.client_spoiled_live == verdict and last is kept and kept.attempt == 2
    assert kept.superseded_reason is None and kept.client_spoiled_live is None
    calls.clear()
    asyncio.run(judged.measure(WavePlanItem(2, 0)))  # warm-ups never count
    asyncio.run(judged.measure(WavePlanItem(3, 1)))  # a server failure is a finding
    assert calls == [] and len(judged.waves) == 4
    unjudged = runner(None)
    assert asyncio.run(unjudged.measure(WavePlanItem(2, 1))).attempt == 1
    assert worth_remeasuring(first) and not worth_remeasuring(wave(first.requests, trial=0))


def test_capture_time_tolerances_are_dbt_s() -> None:
    """The sweep decides to re-measure with the tolerances dbt judges with: one number each."""
    vars_ = yaml.safe_load((ROOT / "dbt" / "dbt_project.yml").read_text())["vars"]
    plan = SweepPlan()
    assert plan.timing_error_tolerance == vars_["timing_error_tolerance"]
    assert plan.start_skew_tolerance == vars_["start_skew_tolerance"]


@pytest.mark.reliability
def test_one_environment_setting_moves_the_capture_and_dbt_tolerances(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SPARKCAP_DBT_VARS reaches every dbt invocation and the capture's re-measure rule (the
    night fills each plan's tolerances from judgement_vars); a typo is one error, not a no-op."""
    from sparkcap.errors import BuildError
    from sparkcap.transform.dbt_build import dbt_args, judgement_vars

    monkeypatch.setenv("SPARKCAP_DBT_VARS", '{"timing_error_tolerance": 0.02}')
    judged = judgement_vars()
    assert judged["timing_error_tolerance"] == 0.02
    assert judged["start_skew_tolerance"] == SweepPlan().start_skew_tolerance  # the project default
    args = dbt_args("build", Path("w.duckdb"), dbt_vars={"threshold_tok_s": 15})
    assert json.loads(args[args.index("--vars") + 1]) == {
        "timing_error_tolerance": 0.02,
        "threshold_tok_s": 15,
    }
    monkeypatch.setenv("SPARKCAP_DBT_VARS", '{"timing_eror_tolerance": 0.02}')
    with pytest.raises(BuildError, match="SPARKCAP_DBT_VARS timing_eror_tolerance: unknown"):
        judgement_vars()
