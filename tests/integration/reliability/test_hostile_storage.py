"""Storage, files and operations under hostile conditions: a /metrics endpoint that
trickles or never ends, warehouse file names that are SQL, corrupt files, read-only and full
disks, an unreadable spooled wave, a run whose writer was killed, a Prefect limit whose size
changed. Each costs one scrape, one wave or one line, never a night."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from sparkcap.config.plan import SweepPlan, SweepRequest
from sparkcap.config.power import PowerSource
from sparkcap.errors import StorageError
from sparkcap.loadgen import power as power_module
from sparkcap.loadgen.metrics import DURING_INTERVAL_S, scrape_into
from sparkcap.loadgen.power import with_power
from sparkcap.loadgen.records import WaveRecord
from sparkcap.loadgen.sweep import new_run_id, run_sweep
from sparkcap.servers.sim.server import SimServer
from sparkcap.store import spool
from sparkcap.store.connection import open_warehouse
from sparkcap.store.runs import run_end_to, run_start_to
from tests.integration.reliability.rawserver import RawServer
from tests.support.cli import cli_in_process, run_cli, sweep_args
from tests.support.servers import python_child
from tests.support.sims import dep, fast_profile
from tests.support.timing import SHORT_STREAM_VARS

pytestmark = [pytest.mark.reliability, pytest.mark.integration]

PLAN = SweepPlan(levels=(1,), trials=1, warmup=False, max_tokens=8, max_remeasures=0)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer([fast_profile("m")]) as s:
        yield s


def one_error_line(p: subprocess.CompletedProcess[str]) -> str:
    """The CLI's stderr, asserted to be exactly one `error:` line with a non-zero exit."""
    lines = p.stderr.strip().splitlines()
    assert p.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    return lines[0]


def waves_of(sim: SimServer, n: int = 1, run_id: str | None = None) -> list[WaveRecord]:
    """``n`` measured waves of one run (not staged anywhere yet)."""
    plan = PLAN.model_copy(update={"trials": n})
    return asyncio.run(run_sweep(dep(sim.endpoint, "m"), "code", plan, run_id or new_run_id()))


# -- item 3: the /metrics scrape --------------------------------------------------------


# A sweep that never ends is a hang, not a slow machine: the guard is far beyond any load's
# slowdown (a 2.4 s sweep of two 4 MiB pages can take over 20 s beside the parallel phase), and what
# a test measures of the client's wall time it measures apart, never by this bound.
HANG_GUARD_S = 120


def _waves_with_metrics_from(
    sim: SimServer,
    metrics_url: str,
    timeout_s: float,
    trials: int = 1,
    during_interval_s: float | None = DURING_INTERVAL_S,
) -> list[WaveRecord]:
    d = dep(sim.endpoint, "m", metrics_url=metrics_url)
    before, after = scrape_into(d, timeout_s=timeout_s, during_interval_s=during_interval_s)
    plan = PLAN.model_copy(update={"trials": trials})

    async def sweep() -> list[WaveRecord]:
        # the bound of the test itself: a scrape without a deadline would hold the wave for ever
        return await asyncio.wait_for(
            run_sweep(d, "code", plan, new_run_id(), before_wave=before, after_wave=after),
            HANG_GUARD_S,
        )

    return asyncio.run(sweep())


def _wave_with_metrics_from(sim: SimServer, metrics_url: str, timeout_s: float) -> WaveRecord:
    (wave,) = _waves_with_metrics_from(sim, metrics_url, timeout_s)
    return wave


# What a scrape may hold a wave beyond its deadline: the event loop's lag and the scrape's own
# work. No absolute bound holds (the wave + 2 deadlines + 3 s is too little: a loaded machine
# can take 7.4 s for a 0.09 s wave and two 1 s scrapes), so what the load costs is measured, as
# the same sweep without metrics, just after. Beside 4 CPU burners on the 2 cores two 1 s
# deadlines held the sweep 2.23-2.36 s (four runs). These tests hold the client's own wall
# time, so they run with the timing tests (client_timing): in the parallel phase a burst of
# load the baseline never saw can take a sweep from 1.57 s to 8.14 s (the twin night and the
# timing tests run beside that phase at niceness -15). Run 20 times each beside one CPU burner
# at niceness -15, the worst overshoots beyond the deadlines were 0.32, 0.30 and 0.25 s: the
# slack is over four times the worst.
HELD_SLACK_S = 1.5


def _without_metrics_s(sim: SimServer, trials: int, scraping_sim: bool = False) -> float:
    """The wall seconds of the same sweep with no trickling page to read (``scraping_sim``:
    the simulator's own /metrics scraped around each wave, as the power test's sweep does),
    on the machine as loaded as it is now: the larger of two, so a lull in the load cannot
    make the bound tighter."""
    spent = []
    for _ in range(2):
        t0 = time.monotonic()
        if scraping_sim:
            d = dep(sim.endpoint, "m")
            before, after = scrape_into(d, during_interval_s=None)
            plan = PLAN.model_copy(update={"trials": trials})
            asyncio.run(
                run_sweep(d, "code", plan, new_run_id(), before_wave=before, after_wave=after)
            )
        else:
            waves_of(sim, trials)
        spent.append(time.monotonic() - t0)
    return max(spent)


def _trickle(_: int) -> Iterator[bytes | float]:
    yield b"# HELP x y\n"
    for _ in range(600):
        yield 0.5
        yield b"#"


@pytest.mark.client_timing
def test_a_trickling_metrics_endpoint_holds_a_wave_no_longer_than_the_scrape_deadline(
    sim: SimServer,
) -> None:
    """A /metrics body trickling a byte a second passed httpx's per-read timeout for ever (a
    0.09 s wave held 122 s): the scrape's deadline is total, and the failure is on the wave."""

    with RawServer(_trickle) as raw:
        t0 = time.monotonic()
        wave = _wave_with_metrics_from(sim, f"http://127.0.0.1:{raw.port}/metrics", 1.0)
        elapsed = time.monotonic() - t0
    # two scrapes of at most 1 s beyond the same wave without metrics, whatever the load
    held = elapsed - _without_metrics_s(sim, 1)
    assert held < 2 * 1.0 + HELD_SLACK_S, (elapsed, held)
    assert [r.status for r in wave.requests] == ["ok"]
    assert wave.metrics_error is not None
    assert wave.metrics_error.count("no complete answer within 1 s") == 2, wave.metrics_error


@pytest.mark.client_timing
def test_a_trickling_metrics_page_is_not_asked_again_after_two_missed_deadlines(
    sim: SimServer,
) -> None:
    """Each wave scraped a trickling page on both sides, so a sweep with re-measures (a loaded
    machine) paid twice the deadline per wave: a one-wave sweep held 79 s. Two misses running
    end the page's scrapes for the sweep; the later waves say why they have no metrics."""
    with RawServer(_trickle) as raw:
        t0 = time.monotonic()
        waves = _waves_with_metrics_from(sim, f"http://127.0.0.1:{raw.port}/metrics", 1.0, trials=4)
        elapsed = time.monotonic() - t0
        asked = raw.ordinal
    assert asked == 2, asked  # the first wave's two scrapes, nothing after them
    # 4 waves x 2 scrapes of 1 s would hold the sweep 8 s; two misses hold it at most 2 s
    held = elapsed - _without_metrics_s(sim, 4)
    assert held < 2 * 1.0 + HELD_SLACK_S, (elapsed, held)
    assert all(r.status == "ok" for w in waves for r in w.requests)
    first, *later = waves
    assert first.metrics_error is not None
    assert first.metrics_error.count("no complete answer within 1 s") == 2, first.metrics_error
    for w in later:
        assert w.metrics_error is not None
        assert w.metrics_error.count("not asked again in this sweep: 2 scrapes running") == 2


def test_an_endless_metrics_body_is_cut_at_the_size_cap_with_bounded_memory(
    sim: SimServer,
) -> None:
    """The 4 MiB cap was checked after the whole body was read (1.1 GB peak for a large one):
    reading stops at the cap, and the client's traced memory stays near it."""
    piece = b"m 1\n" * 16384  # 64 KiB of valid samples, 64 MiB in all

    def endless(_: int) -> Iterator[bytes]:
        for _ in range(1024):
            yield piece

    with RawServer(endless) as raw:
        tracemalloc.start()
        try:
            wave = _wave_with_metrics_from(sim, f"http://127.0.0.1:{raw.port}/metrics", 10.0)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 24 << 20, peak
    assert wave.metrics_error is not None
    assert wave.metrics_error.count("body larger than 4194304 bytes") == 2, wave.metrics_error
    assert wave.server_metrics == [] and [r.status for r in wave.requests] == ["ok"]


@pytest.mark.reliability
def test_a_page_of_too_many_series_keeps_a_bounded_number_of_samples(sim: SimServer) -> None:
    """A byte cap bounds what is fetched, not what is parsed and kept (4 MiB of gauges a
    second would store 2.15 M rows for an 8 s wave): each scrape keeps at most
    MAX_SNAPSHOT_SAMPLES and says how many the page held."""
    from sparkcap.loadgen.metrics import MAX_SNAPSHOT_SAMPLES

    n = MAX_SNAPSHOT_SAMPLES + 10_000
    page = b"# TYPE g gauge\n" + b"".join(b'g{i="%d"} 1\n' % i for i in range(n))

    def many(_: int) -> Iterator[bytes]:
        yield page

    with RawServer(many) as raw:
        url = f"http://127.0.0.1:{raw.port}/metrics"
        (wave,) = _waves_with_metrics_from(sim, url, 10.0, during_interval_s=None)
    assert len(wave.server_metrics) == 2 * MAX_SNAPSHOT_SAMPLES
    assert wave.metrics_error is not None
    said = f"samples stopped at {MAX_SNAPSHOT_SAMPLES} (the page holds {n})"
    assert wave.metrics_error.count(said) == 2, wave.metrics_error
    assert [r.status for r in wave.requests] == ["ok"]


# -- item 7: any warehouse file name ----------------------------------------------------


@pytest.mark.parametrize("name", ["raw.duckdb", "marts.d\"b 'x'.duckdb"], ids=["raw", "quotes"])
def test_any_warehouse_file_name_works_for_sweep_and_build(
    sim: SimServer, tmp_path: Path, name: str
) -> None:
    """`--db raw.duckdb` stopped everything ("Ambiguous reference to catalog"), `marts.…`
    broke dbt and a `"` entered its DDL: the file is attached under a fixed name."""
    from sparkcap.night.sweeps import run_sweeps
    from sparkcap.transform.dbt_build import build

    db = tmp_path / "wh" / name
    req = SweepRequest(deployment=dep(sim.endpoint, "m"), workload="code", plan=PLAN)
    run_id = asyncio.run(run_sweeps([req], db)).run_id
    # the marts a capacity needs and their tests: the name reaches dbt's attach and DDL the
    # same way for any selection (the whole project runs on the twin and reliability nights)
    build(db, select="+fct_capacity", dbt_vars=SHORT_STREAM_VARS)
    with open_warehouse(db, read_only=True) as con:
        rows = con.execute(
            "select r.status, c.workload, c.capacity_streams from raw.runs r "
            "join marts.fct_capacity c using (run_id) where run_id = ?",
            [run_id],
        ).fetchall()
    # the file's name is the point: the run, staged and built into the marts under it (its
    # capacity depends on how fast a loaded machine ran the simulator, so it is not asserted)
    assert [(status, workload) for status, workload, _ in rows] == [("complete", "code")]
    assert [p.name for p in db.parent.iterdir()] == [name]  # no stray .tmp or .wal


# -- item 8: corrupt files, read-only and full disks -------------------------------------


@contextlib.contextmanager
def tmpfs(path: Path, size_kb: int) -> Iterator[Path]:
    """A small file system of its own (tests run as root): a disk that really fills up or
    really is read-only, which chmod cannot fake for root."""
    path.mkdir(parents=True)
    p = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk: Path) -> Path:
    """Fill the disk to its last byte; returns the file to remove to free it."""
    ballast = disk / "ballast"
    with contextlib.suppress(OSError), ballast.open("wb") as f:
        while True:
            f.write(b"\0" * 4096)
            f.flush()
    return ballast


def _truncated(tmp_path: Path) -> Path:
    good = tmp_path / "good.duckdb"
    run_start_to(good, "r", {}, time.time_ns())
    run_end_to(good, "r", "complete")
    bad = tmp_path / "cut.duckdb"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    return bad


@pytest.mark.parametrize("kind", ["not-duckdb", "truncated", "a-folder"])
def test_a_corrupt_or_truncated_warehouse_is_one_error_line_naming_it(
    sim: SimServer, tmp_path: Path, kind: str
) -> None:
    if kind == "not-duckdb":
        db = tmp_path / "w.duckdb"
        db.write_bytes(b"PK\x03\x04 this is a zip, not a warehouse" * 100)
    elif kind == "truncated":
        db = _truncated(tmp_path)
    else:
        db = tmp_path / "w.duckdb"
        db.mkdir()
    args = sweep_args(sim.endpoint)
    args += ["--levels", "1", "--trials", "1", "--max-tokens", "8", "--no-warmup"]
    line = one_error_line(cli_in_process(*args, "--max-remeasures", "0", "--db", str(db)))
    assert str(db) in line, line
    if kind != "truncated":  # what survives of a cut file may still be read
        read = one_error_line(
            cli_in_process("sql", "select count(*) from raw.runs", "--db", str(db))
        )
        assert str(db) in read, read


def test_a_read_only_file_system_is_one_error_line_and_reads_still_work(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", 8192) as disk:
        db = disk / "w.duckdb"
        run_start_to(db, "r", {}, time.time_ns())
        run_end_to(db, "r", "complete")
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        # child processes: the read-only disk as a command meets it from its start, nothing of
        # it opened before the remount by the process that runs the command
        line = one_error_line(run_cli("build", "--db", str(db), timeout=120))
        assert str(db) in line and "Read-only file system" in line and "EROFS" in line, line
        q = run_cli(
            "sql", "select status from raw.runs", "--db", str(db), "--format", "csv", timeout=120
        )
        assert q.returncode == 0 and q.stdout.split() == ["status", "complete"], q.stderr


def test_a_full_warehouse_disk_names_enospc_and_keeps_the_wave_in_the_spool(
    sim: SimServer, tmp_path: Path
) -> None:
    """A full warehouse disk recorded `cannot rollback - no transaction is active`, hiding
    ENOSPC: the error names the file and ENOSPC, the wave waits in the spool, and once
    there is room the next `stage` stores it."""
    (wave,) = waves_of(sim)
    with tmpfs(tmp_path / "disk", 8192) as disk:
        db = disk / "w.duckdb"
        run_start_to(db, wave.run_id, {}, time.time_ns())
        ballast = fill(disk)
        spool.write_wave(wave, db)  # the spool is on another disk
        with pytest.raises(RuntimeError) as err:  # errors.StorageError
            spool.stage_spool(db)
        text = str(err.value)
        assert str(db) in text and "ENOSPC" in text and "no transaction" not in text, text
        assert len(spool.pending(db)) == 1
        line = one_error_line(cli_in_process("stage", "--db", str(db)))
        assert "ENOSPC" in line and str(db) in line, line
        ballast.unlink()
        assert spool.stage_spool(db) == 1
        with open_warehouse(db, read_only=True) as con:
            n = con.execute("select count(*) from raw.waves").fetchone()
        assert n == (1,) and spool.pending(db) == []


def test_a_full_spool_disk_keeps_the_wave_in_the_warehouse_or_names_its_loss(
    sim: SimServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """A full SPARKCAP_HOME lost a measured wave and left a `.tmp-*` folder: the wave goes
    straight into its warehouse (with a warning); when that cannot take it either, the error
    names the wave as lost and why. No partial folder is left."""
    first, second = waves_of(sim, 2)
    db = tmp_path / "w.duckdb"
    run_start_to(db, first.run_id, {}, time.time_ns())
    with tmpfs(tmp_path / "full-home", 1024) as home:
        monkeypatch.setenv("SPARKCAP_HOME", str(home))
        fill(home)
        with caplog.at_level(logging.WARNING, logger="sparkcap"):
            spool.write_wave(first, db)
        assert "staged straight into" in caplog.text and "ENOSPC" in caplog.text
        with open_warehouse(db, read_only=True) as con:
            assert con.execute("select wave_id from raw.waves").fetchall() == [(first.wave_id,)]
        db.unlink()
        db.mkdir()  # the warehouse cannot take it either
        with pytest.raises(RuntimeError) as err:  # errors.StorageError
            spool.write_wave(second, db)
        text = str(err.value)
        assert f"wave {second.wave_id} of run {second.run_id} is lost" in text, text
        assert "ENOSPC" in text and str(db) in text, text
        leftovers = [p for p in home.rglob("*") if p.name.startswith(".tmp-")]
        assert leftovers == []


# -- item 9: an unreadable spooled wave --------------------------------------------------


def test_an_unreadable_spooled_wave_is_quarantined_and_the_rest_are_staged(
    sim: SimServer, db_path: Path, caplog: Any
) -> None:
    waves = waves_of(sim, 3)
    run_id = waves[0].run_id
    run_start_to(db_path, run_id, {}, time.time_ns())
    folders = [spool.write_wave(w, db_path) for w in waves]
    damaged = folders[1] / "requests.arrow"
    damaged.write_bytes(damaged.read_bytes()[:100])
    with caplog.at_level(logging.WARNING, logger="sparkcap"):
        assert spool.stage_spool(db_path) == 2
    assert spool.pending(db_path) == []
    (moved,) = [p for p in spool.quarantine_root().rglob("why.txt")]
    assert moved.parent.name.startswith(folders[1].name)
    assert (moved.parent / "requests.arrow").exists()  # kept, not deleted
    assert str(folders[1]) in caplog.text and str(moved.parent) in caplog.text
    with open_warehouse(db_path, read_only=True) as con:
        staged = {r[0] for r in con.execute("select wave_id from raw.waves").fetchall()}
        outcome = con.execute(
            "select status, reason from raw.step_outcomes where run_id = ? and step = 'stage'",
            [run_id],
        ).fetchone()
    assert staged == {waves[0].wave_id, waves[2].wave_id}
    assert outcome is not None and outcome[0] == "failed" and folders[1].name in outcome[1]
    assert spool.stage_spool(db_path) == 0  # it blocks nothing any more
    # a later damaged wave of the same run is named beside the first, not instead of it
    later = spool.write_wave(waves_of(sim, 4, run_id=run_id)[3], db_path)  # its 4th trial
    (later / "requests.arrow").write_bytes(b"not arrow")
    with caplog.at_level(logging.WARNING, logger="sparkcap"):
        assert spool.stage_spool(db_path, None, run_id) == 0
    with open_warehouse(db_path, read_only=True) as con:
        (reason,) = con.execute(
            "select reason from raw.step_outcomes where run_id = ? and step = 'stage'", [run_id]
        ).fetchone() or ("",)
    assert folders[1].name in reason and later.name in reason and reason.startswith("2 ")


def test_a_machine_fault_reading_the_spool_keeps_every_wave(
    sim: SimServer, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of file handles (EMFILE) is no fault of the waves: none is quarantined."""
    import errno

    waves = waves_of(sim, 2)
    run_start_to(db_path, waves[0].run_id, {}, time.time_ns())
    folders = [spool.write_wave(w, db_path) for w in waves]

    def no_handles(folder: Path) -> object:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(spool, "_read", no_handles)
    with pytest.raises(StorageError, match="Too many open files"):
        spool.stage_spool(db_path)
    assert all(f.is_dir() for f in folders) and not spool.quarantine_root().exists()


# -- item 12: a run whose writer was killed ----------------------------------------------


def _run_status(db: Path, run_id: str) -> tuple[str, str | None]:
    with duckdb.connect(":memory:") as con:
        con.execute(f"attach '{db}' as w (read_only)")
        row = con.execute(
            "select status, status_reason from w.raw.runs where run_id = ?", [run_id]
        ).fetchone()
    assert row is not None
    return str(row[0]), row[1]


@pytest.mark.parametrize("distributed", [False, True], ids=["local", "distributed-parent"])
def test_a_run_whose_writer_was_killed_is_marked_by_the_next_stage(
    tmp_path: Path, distributed: bool
) -> None:
    """`kill -9` left the run `running` for ever. While its writer lives, a `stage` leaves it
    alone (a distributed parent holds its run open for hours without touching the
    warehouse); once the writer is gone, the next `sparkcap stage` marks it incomplete,
    `abandoned`, and a distributed night can still be finished."""
    db = tmp_path / "w.duckdb"
    run_id = new_run_id()
    config = {"distributed": {"lake": str(tmp_path / "lake")}} if distributed else {}
    start_the_run = (
        "import sys, time; from sparkcap.store.runs import run_start_to; "
        f"run_start_to({str(db)!r}, {run_id!r}, {config!r}, time.time_ns()); "
        "print('started', flush=True); time.sleep(120)"
    )
    with python_child(start_the_run, ready="started") as writer:
        assert cli_in_process("stage", "--db", str(db)).returncode == 0
        assert _run_status(db, run_id) == ("running", None)  # alive: left alone
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(10)
    p = cli_in_process("stage", "--db", str(db))
    assert p.returncode == 0, p.stderr
    status, reason = _run_status(db, run_id)
    assert status == "incomplete" and reason is not None and reason.startswith("abandoned:")
    assert f"pid {writer.pid}" in reason
    assert ("--finish" in reason) is distributed
    if distributed:  # what `sparkcap run --finish` records once it has staged the lake
        run_end_to(db, run_id, "complete")
        assert _run_status(db, run_id)[0] == "complete"


# -- item 12: a Prefect limit whose size changed -----------------------------------------


class _FakeLimits:
    """The part of Prefect's sync client ``ensure_limit`` uses, over a dict."""

    def __init__(self, limits: dict[str, int]) -> None:
        self.limits = limits

    def __enter__(self) -> _FakeLimits:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def read_global_concurrency_limit_by_name(self, name: str) -> Any:
        from types import SimpleNamespace

        from prefect.exceptions import ObjectNotFound

        if name not in self.limits:
            raise ObjectNotFound(http_exc=Exception(name))
        return SimpleNamespace(name=name, limit=self.limits[name])

    def create_global_concurrency_limit(self, create: Any) -> None:
        self.limits[create.name] = create.limit

    def update_global_concurrency_limit(self, name: str, update: Any) -> None:
        self.limits[name] = update.limit


def test_a_changed_host_stream_budget_resizes_its_prefect_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import prefect.client.orchestration as orchestration

    from sparkcap.night.schedule import ensure_limit

    fake = _FakeLimits({})
    monkeypatch.setattr(orchestration, "get_client", lambda **_: fake)
    ensure_limit("host:a", 256)
    ensure_limit("host:a", 64)  # the fleet file's budget was lowered
    ensure_limit("host:b", 8)
    assert fake.limits == {"host:a": 64, "host:b": 8}


@pytest.mark.client_timing
def test_a_trickling_power_page_is_not_read_again_after_two_missed_deadlines(
    sim: SimServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The power exporter's page is read around and during every wave like /metrics, so it
    gets the same rule: two reads running past the deadline end its reads for the sweep."""
    monkeypatch.setattr(power_module, "SCRAPE_TIMEOUT_S", 0.5)
    with RawServer(_trickle) as raw:
        # a long sampling interval: only the reads around each wave
        source = PowerSource(kind="dcgm", url=f"http://127.0.0.1:{raw.port}/metrics", interval_s=60)
        d = dep(sim.endpoint, "m", power=source)
        before, after = with_power(d, scrape_into(d, during_interval_s=None))
        plan = PLAN.model_copy(update={"trials": 3})
        t0 = time.monotonic()
        waves = asyncio.run(
            asyncio.wait_for(
                run_sweep(d, "code", plan, new_run_id(), before_wave=before, after_wave=after),
                HANG_GUARD_S,
            )
        )
        elapsed = time.monotonic() - t0
        asked = raw.ordinal
    assert asked == 2, asked
    # beyond the same sweep with no power page (the simulator's /metrics scraped in both):
    # two 0.5 s deadlines
    held = elapsed - _without_metrics_s(sim, 3, scraping_sim=True)
    assert held < 2 * 0.5 + HELD_SLACK_S, (elapsed, held)
    later = [s.reason for w in waves[1:] for s in w.power_samples]
    assert len(later) == 4 and all(
        "not asked again in this sweep: 2 reads" in str(r) for r in later
    )
    assert all(r.status == "ok" for w in waves for r in w.requests)
