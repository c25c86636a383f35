"""A client host's calibrated budget: which size it is, and what it does to a plan."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sparkcap.config.deployment import Deployment
from sparkcap.config.plan import SearchPlan, SweepPlan, SweepRequest
from sparkcap.loadgen.records import ProcessTiming, RequestRecord, Status, WaveRecord
from sparkcap.night import calibrate as cal
from sparkcap.night.sweeps import within_host_budget
from tests.support.waves import wave_record


def figures(streams: int, spoiled: str | None = None, procs: int = 1) -> cal.SizeFigures:
    return cal.SizeFigures(
        streams=streams,
        waves=1,
        client_processes=procs,
        start_skew_ms=1.0,
        median_decode_span_ms=2000.0,
        timing_error_bound=0.001,
        loop_lag_p99_ms=2.0,
        client_cpu_pct=10.0,
        failed_streams=0,
        spoiled=spoiled,
    )


def budget(
    streams: int = 128, procs: int = 1, host: str = "client-a", cpus: int = 2
) -> cal.HostBudget:
    return cal.HostBudget(
        host=host,
        cpus=cpus,
        client_cpus=(0,),
        server_cpus=(1,),
        measured_at=datetime(2026, 12, 2, 21, 30, tzinfo=UTC),
        timing_tolerance=0.005,
        skew_tolerance=0.05,
        stream_tokens=120,
        stream_tok_s=60.0,
        sizes=(figures(streams, procs=procs), figures(2 * streams, "start skew", procs)),
        budget_streams=streams,
        client_processes=procs,
        ceiling_found=True,
    )


# -- the budget from per-size verdicts ----------------------------------------------------------


def test_the_budget_is_the_last_clean_size_before_the_first_spoiled_one() -> None:
    sizes = [figures(16), figures(32), figures(64, "timing error bound"), figures(128)]
    assert cal.budget_from(sizes) == 32  # a clean 128 after a spoiled 64 does not count
    assert cal.budget_from(list(reversed(sizes))) == 32  # judged in size order
    assert cal.budget_from([figures(16, "start skew"), figures(32)]) == 0
    assert cal.budget_from([figures(16), figures(32)]) == 32


def test_the_ladder_doubles_up_to_the_cap_and_tries_the_cap_itself() -> None:
    assert cal.ladder(256) == (16, 32, 64, 128, 256)
    assert cal.ladder(300) == (16, 32, 64, 128, 256, 300)
    assert cal.ladder(8) == (8,)


def _wave(skew_ms: float, span_ms: float, n: int = 4, failed: int = 0) -> WaveRecord:
    w = wave_record(n, wave_id="w", deployment="calibrate", model="calibrate")
    for i in range(n):
        r = RequestRecord(f"w/s{i}", i, "p", 120, 120, 0.0)
        r.first_token_ns, r.last_token_ns = 1_000_000, 1_000_000 + int(span_ms * 1e6)
        r.status = Status.OK if i >= failed else Status.SERVER_ERROR
        r.error = None if i >= failed else "HTTP 503"
        w.requests.append(r)
    w.start_skew_ms = skew_ms
    w.timing_error_bound = 0.001
    w.client_processes = [ProcessTiming(0, 1, n, 0, 0, 1.0, 2.0, 10.0, 0.001)]
    return w


def test_a_size_is_judged_by_the_capture_rule_with_dbts_vars_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tolerance is dbt's, as SPARKCAP_DBT_VARS sets it: no copy of the threshold here; the
    verdict is dbt's compiled rule's (handed in), in its words."""
    wave = _wave(skew_ms=60.0, span_ms=2000.0)  # 3 % of the span
    assert cal.size_figures(4, [wave], lambda w: None).spoiled is None
    monkeypatch.setenv("SPARKCAP_DBT_VARS", json.dumps({"start_skew_tolerance": 0.02}))
    plan = cal.judged_plan((4,))
    assert plan.start_skew_tolerance == 0.02  # recorded with the budget
    why = "client release: start skew 60.0 ms > 2% of the median decode span"
    verdict = cal.size_figures(4, [wave, wave], lambda w: why)
    assert verdict.spoiled == why  # said once for the size


def test_a_size_whose_streams_failed_is_not_clean() -> None:
    verdict = cal.size_figures(4, [_wave(1.0, 2000.0, failed=1)], lambda w: None)
    assert verdict.failed_streams == 1
    assert verdict.spoiled == "1 of 4 streams failed (server_error: HTTP 503)"


# -- the cap ------------------------------------------------------------------------------------


def test_a_search_above_the_budget_is_capped_and_says_so_once() -> None:
    plan = SweepPlan(search=SearchPlan(max_level=512))
    capped, line = cal.plan_within_budget(plan, budget(128), cores=2)
    assert capped.search is not None and capped.search.max_level == 128
    assert plan.search is not None and plan.search.max_level == 512  # a copy, not changed
    assert line == (
        "search capped at 128 streams: this host's calibrated budget (sparkcap calibrate, "
        "2026-12-02: 128 streams over 1 client process)"
    )
    same, nothing = cal.plan_within_budget(SweepPlan(search=SearchPlan(max_level=64)), budget())
    assert nothing is None and same.search is not None and same.search.max_level == 64


def test_no_calibration_changes_nothing() -> None:
    plan = SweepPlan(search=SearchPlan(max_level=4096))
    assert cal.plan_within_budget(plan, None) == (plan, None)


def test_a_grid_level_above_the_budget_is_measured_and_named() -> None:
    plan = SweepPlan(levels=(64, 128, 256, 512))
    kept, line = cal.plan_within_budget(plan, budget(128), cores=2)
    assert kept is plan
    assert line is not None and line.startswith("warning: grid levels 256, 512 above 128 streams")


def test_a_night_is_never_credited_more_processes_than_the_test_measured() -> None:
    """Budget 256 over 2 processes: a sweep on one process gets 128, one on 8 cores 256."""
    two = budget(256, procs=2, cpus=4)
    assert cal.streams_within(two, SweepPlan(client_processes=1)) == 128
    assert cal.streams_within(two, SweepPlan(), cores=8) == 256
    # below min_streams_per_process per process, a wave is one process's
    assert cal.streams_within(budget(20, procs=2, cpus=4), SweepPlan(), cores=2) == 10


def test_the_sweeps_cap_every_request_and_say_each_line_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dep = Deployment(name="d", endpoint="http://127.0.0.1:9/v1", model="m")  # type: ignore[arg-type]
    searched = SweepPlan(search=SearchPlan(max_level=512), client_processes=1)
    reqs = [
        SweepRequest(deployment=dep, workload=w, plan=searched)  # type: ignore[arg-type]
        for w in ("code", "prose")
    ]
    with caplog.at_level(logging.WARNING, logger="sparkcap.night.sweeps"):
        out = within_host_budget(reqs, budget(128))
    assert [r.plan.search.max_level for r in out if r.plan.search] == [128, 128]
    assert [r.message for r in caplog.records] == [
        "search capped at 128 streams: this host's calibrated budget (sparkcap calibrate, "
        "2026-12-02: 128 streams over 1 client process)"
    ]
    assert within_host_budget(reqs, None) == reqs


# -- the file -----------------------------------------------------------------------------------


def test_the_budget_file_is_this_hosts_or_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "host-budget.json"
    assert cal.read_budget(path, host="client-a") is None  # no file: unchanged behaviour
    monkeypatch.setattr(cal, "host_cpus", lambda: (0, 1))
    cal.write_budget(budget(), path)
    assert cal.read_budget(path, host="client-a") == budget()
    with caplog.at_level(logging.WARNING, logger="sparkcap.night.calibrate"):
        assert cal.read_budget(path, host="client-b") is None
    assert "calibrated on host client-a, not this one (client-b): not applied" in caplog.text
    monkeypatch.setattr(cal, "host_cpus", lambda: (0, 1, 2, 3))
    assert cal.read_budget(path, host="client-a") is None  # another CPU count: recalibrate


def test_a_damaged_budget_file_is_one_error_line(tmp_path: Path) -> None:
    path = tmp_path / "host-budget.json"
    path.write_text('{"host": "x", "budget_streams": "lots"}')
    with pytest.raises(cal.CalibrationError, match="is not a host budget sparkcap calibrate"):
        cal.read_budget(path, host="x")


@pytest.mark.reliability
def test_a_tampered_budget_file_is_one_error_line_never_a_traceback_or_an_escape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """400 digits of `budget_streams` (an OverflowError where the budget is divided by its
    processes) and a `host` holding an escape sequence (which the "calibrated on another host"
    warning would print) are each a file calibrate never wrote."""
    path = tmp_path / "host-budget.json"
    monkeypatch.setattr(cal, "host_cpus", lambda: (0, 1))
    cal.write_budget(budget(), path)
    good = json.loads(path.read_text())
    for field, value in [
        ("budget_streams", int("9" * 400)),
        ("client_processes", 10**6),
        ("host", "client-a\x1b[2J\x1b]0;owned\x07"),
        ("stream_tok_s", float("inf")),
    ]:
        path.write_text(json.dumps({**good, field: value}))
        with pytest.raises(cal.CalibrationError, match="is not a host budget sparkcap calibrate"):
            cal.read_budget(path, host="client-a")


# -- pinning ------------------------------------------------------------------------------------


def test_the_server_gets_cpus_of_its_own_where_there_are_two() -> None:
    assert cal.split_cpus((0, 1), 1) == ((1,), (0,))
    assert cal.split_cpus((0, 1, 2, 3), 2) == ((2, 3), (0, 1))
    assert cal.split_cpus((0, 1, 2, 3), 1) == ((3,), (0, 1, 2))
    assert cal.split_cpus((0,), 1) == ((), (0,))  # nothing to keep apart
    assert cal.parse_cpus("0,2-3") == (0, 2, 3)
    with pytest.raises(ValueError, match="not a CPU number"):
        cal.parse_cpus("zero")


def test_calibrate_prints_the_sizes_and_the_budget() -> None:
    lines = cal.budget_lines(budget(), Path("/w/host-budget.json"))
    assert lines[0].startswith("host client-a: 2 CPUs; simulator on CPU 1, client on CPU 0")
    assert lines[3].split()[:2] == ["128", "1"] and lines[3].endswith("clean")
    assert lines[4].endswith("start skew")
    assert lines[-2] == "budget: 128 streams over 1 client process (128 per process)"
