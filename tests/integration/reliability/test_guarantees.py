"""What sparkcap promises when things go wrong (docs/concepts/promises.md)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from sparkcap.config.plan import SweepPlan, SweepRequest
from sparkcap.errors import PreflightError
from sparkcap.night.progress import live_decode_tok_s, live_ttft_s
from sparkcap.night.sweeps import run_sweeps
from sparkcap.servers.sim.server import SimServer
from sparkcap.store import spool
from sparkcap.store.connection import warehouse_key
from sparkcap.store.runs import run_start_to
from tests.integration.cli_sweeps import FROM_ENV, LITERAL, CliSweeps
from tests.integration.reliability.imperfect_nights import (
    CANARY as NIGHT_CANARY,
)
from tests.integration.reliability.imperfect_nights import (
    CANARY_HEADER as NIGHT_CANARY_HEADER,
)
from tests.integration.reliability.imperfect_nights import ImperfectNight, root_logging_into
from tests.paths import ROOT
from tests.spread import within
from tests.support.cli import cli_in_process, run_cli, sweep_args
from tests.support.fleets import fleet_load_error
from tests.support.queries import q, wave_census
from tests.support.servers import python_child
from tests.support.sims import dep, fast_profile
from tests.support.timing import SHORT_STREAM_VARS

pytestmark = [pytest.mark.reliability, pytest.mark.integration]


def one_sweep(
    endpoint: str,
    db: Path,
    model: str = "m",
    levels: tuple[int, ...] = (1, 2),
    max_tokens: int = 12,
    **dep_kw: object,
) -> object:
    req = SweepRequest(
        deployment=dep(endpoint, model, **dep_kw),
        workload="code",
        plan=SweepPlan(levels=levels, trials=1, max_tokens=max_tokens, max_remeasures=0),
    )
    return asyncio.run(run_sweeps([req], db))


def test_stepping_the_wall_clock_changes_no_duration(db_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    real = time.time_ns
    calls = {"n": 0}

    def jumpy() -> int:
        calls["n"] += 1
        return real() + (-1 if calls["n"] % 2 else 1) * 3600 * 10**9  # ±1 h on every read

    with SimServer([fast_profile("m")]) as sim:
        monkeypatch.setattr(time, "time_ns", jumpy)
        result = one_sweep(sim.endpoint, db_path)
        monkeypatch.undo()
    for w in result.waves:  # type: ignore[attr-defined]
        for r in w.requests:
            assert 0 <= r.sent_ns < r.first_token_ns <= r.last_token_ns < r.end_ns
            assert r.end_ns < 30 * 10**9  # offsets are monotonic, never an hour
            # an hour's step would read a TTFT of ~3600 s and a rate of ~0.003 tok/s (or a
            # negative span); bounds this wide hold on a machine that starves the test seconds
            assert 0 < (live_ttft_s(r) or 0) < 60 and 0.1 < (live_decode_tok_s(r) or 0) < 1e5


def test_second_writer_gets_database_is_busy_and_nothing_is_lost(
    db_path: Path, tmp_path: Path
) -> None:
    with SimServer([fast_profile("m")]) as sim:
        one_sweep(sim.endpoint, db_path)
        hold = (
            f"import duckdb, time; c = duckdb.connect({str(db_path)!r}); print('held', "
            "flush=True); time.sleep(60)"
        )
        with python_child(hold, ready="held"):
            # a child process: DuckDB's file lock is per process, and the busy database is
            # what a second sparkcap process meets
            p = run_cli(
                *sweep_args(sim.endpoint),
                "--levels",
                "1",
                "--trials",
                "1",
                "--max-tokens",
                "8",
                "--max-remeasures",
                "0",
                "--db",
                str(db_path),
                env={
                    **os.environ,
                    "SPARKCAP_BUSY_WAIT_S": "1",
                    "SPARKCAP_HOME": str(tmp_path / "h"),
                },
                timeout=120,
            )
            assert p.returncode == 1
            assert p.stderr.strip().splitlines() == [
                f"error: database is busy: {db_path} is held by another process (waited 1 s)"
            ]
    # once the writer is gone, readers work and the earlier run is intact
    q = cli_in_process(
        "sql", "select count(*) as n from raw.waves", "--db", str(db_path), "--format", "csv"
    )
    assert q.returncode == 0 and q.stdout.splitlines() == ["n", "4"]


def test_spooled_waves_are_recovered_by_the_next_run(db_path: Path) -> None:
    """A wave whose staging never happened (crash, kill -9, busy database) is not lost."""
    from sparkcap.loadgen.sweep import new_run_id, run_sweep

    with SimServer([fast_profile("m")]) as sim:
        d = dep(sim.endpoint, "m")
        lost_run = new_run_id()
        waves = asyncio.run(
            run_sweep(
                d,
                "code",
                SweepPlan(levels=(2,), trials=1, max_tokens=8, max_remeasures=0),
                lost_run,
            )
        )
        run_start_to(db_path, lost_run, {}, time.time_ns())  # the run had started
        for w in waves:
            spool.write_wave(w, db_path)  # written, never staged: the process "died" here
        assert len(spool.pending(db_path)) == 2
        one_sweep(sim.endpoint, db_path)  # the next run stages them first
    assert spool.pending(db_path) == []
    n = q(db_path, "select count(*) from raw.requests where run_id = ?", [lost_run])[0][0]
    assert n == 4


def test_kill_9_during_staging_leaves_whole_waves(tmp_path: Path) -> None:
    db = tmp_path / "k.duckdb"
    script = tmp_path / "stage_forever.py"
    script.write_text(f"""
import sys, numpy as np
sys.path.insert(0, {str(ROOT / "benchmarks")!r})
from warehouse_build import night_waves
from sparkcap.store.connection import open_warehouse
from sparkcap.store.staging import stage_tables
with open_warehouse({str(db)!r}) as con:
    for n, (wid, t) in enumerate(night_waves("r-kill", 8, 200, np.random.default_rng(0)), 1):
        stage_tables(con, [wid], t)
        print("staged", n, flush=True)
""")
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "SPARKCAP_HOME": str(tmp_path / "h")},
    )
    # killed once two waves are known committed, whatever the machine's load (a fixed sleep
    # once killed it before the first commit on a loaded machine): the stager is then inside
    # the third wave's transaction, or later
    assert proc.stdout is not None and proc.stdout.readline().strip() == "staged 1"
    assert proc.stdout.readline().strip() == "staged 2"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    n_waves, bad = wave_census(db)  # DuckDB recovers from its WAL without manual steps
    assert n_waves >= 2 and bad == 0  # the committed waves survive; none is partial


def test_kill_9_of_a_real_sparkcap_stage_leaves_whole_waves_and_the_next_stages_the_rest(
    tmp_path: Path,
) -> None:
    """`sparkcap stage` (the real CLI process) is killed with SIGKILL while it stages a spooled
    night: every wave in the warehouse is whole or absent, and the next `sparkcap stage`
    stages exactly the rest (each wave once)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.ipc as ipc

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from warehouse_build import night_waves

    from sparkcap.loadgen.records import WaveRecord
    from sparkcap.store.arrow_tables import metrics_table

    db, home = tmp_path / "k.duckdb", tmp_path / "home"
    run = "r-kill9"
    run_start_to(db, run, {}, time.time_ns())
    root = home / "spool" / warehouse_key(db) / run
    empty_metrics = metrics_table(WaveRecord("x", run, "d", "m", "http://x/v1", "code", 1, 1, 0, 0))
    n_spooled = 0
    for wid, tables in night_waves(run, 3, 300, np.random.default_rng(1)):
        folder = root / wid.replace("/", "__")
        folder.mkdir(parents=True)
        for name, table in {**tables, "server_metrics": empty_metrics}.items():
            with (
                pa.OSFile(str(folder / f"{name}.arrow"), "wb") as sink,
                ipc.new_file(sink, table.schema) as w,
            ):
                w.write_table(table)
        (folder / "wave_id").write_text(wid)
        n_spooled += 1
    env = {**os.environ, "SPARKCAP_HOME": str(home)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkcap.cli", "stage", "--db", str(db)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # kill once some, not all, waves have been staged
        left = sum(1 for p in root.iterdir() if not p.name.startswith(".")) if root.exists() else 0
        if 0 < left < n_spooled - 5:
            break
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL

    staged, bad = wave_census(db)
    assert bad == 0 and 0 < staged < n_spooled  # killed mid-way, nothing half-written
    p = cli_in_process("stage", "--db", str(db), env=env)
    assert p.returncode == 0, p.stderr
    assert wave_census(db) == (n_spooled, 0)  # the rest, each wave once
    assert spool.pending(db) == [] or not root.exists()


def test_waves_land_only_in_the_warehouse_they_were_measured_for(tmp_path: Path) -> None:
    """One SPARKCAP_HOME, two warehouses: waves spooled for busy.duckdb (its writer gone
    mid-sweep) are staged into busy.duckdb by its next stage, never into other.duckdb by a
    sweep there; a wave whose run row is missing is left in the spool, not staged as an orphan."""
    from sparkcap.loadgen.sweep import new_run_id, run_sweep

    busy, other, restored = (tmp_path / f"{n}.duckdb" for n in ("busy", "other", "restored"))
    with SimServer([fast_profile("m")]) as sim:
        run = new_run_id()
        run_start_to(busy, run, {}, time.time_ns())
        plan = SweepPlan(levels=(1,), trials=1, max_tokens=8, max_remeasures=0)
        for w in asyncio.run(run_sweep(dep(sim.endpoint, "m"), "code", plan, run)):
            spool.write_wave(w, busy)
        assert len(spool.pending(busy)) == 2 and spool.pending(other) == []
        one_sweep(sim.endpoint, other)  # a sweep into another warehouse, same home
        # a wave measured for a warehouse file that was replaced since: no run row there
        orphan = new_run_id()
        for w in asyncio.run(run_sweep(dep(sim.endpoint, "m"), "code", plan, orphan)):
            spool.write_wave(w, restored)
    with duckdb.connect(str(other), read_only=True) as con:
        assert con.execute("select count(*) from raw.waves where run_id = ?", [run]).fetchone() == (
            0,
        )
    assert spool.stage_spool(busy) == 2
    with duckdb.connect(str(busy), read_only=True) as con:
        assert con.execute("select count(*) from raw.waves where run_id = ?", [run]).fetchone() == (
            2,
        )
    run_start_to(restored, new_run_id(), {}, time.time_ns())  # the file exists, the run does not
    assert spool.stage_spool(restored) == 0
    assert len(spool.pending(restored)) == 2  # kept, not lost, not an orphan
    with duckdb.connect(str(restored), read_only=True) as con:
        assert con.execute("select count(*) from raw.waves").fetchone() == (0,)


def test_canary_api_key_appears_nowhere(
    imperfect_cli_night: ImperfectNight, db_path: Path, tmp_path: Path
) -> None:
    """The session's imperfect CLI night (``imperfect_nights.py``) sends a canary API key
    and a canary header value to its ``huge`` deployment, with the root logger at DEBUG into a
    file: neither reaches its warehouse, logs, reports, data docs or SPARKCAP_HOME. The key
    really travelled (the simulator answers 401 without it, and every stream was answered);
    a sweep without it, and one asking for a model the server lacks, are refused here, at
    DEBUG too, and their errors hold no key either."""
    night = imperfect_cli_night
    statuses = q(
        night.db,
        "select distinct r.status from raw.requests r join raw.waves w using (wave_id) "
        "where w.deployment = 'huge'",
    )
    assert statuses == [("ok",)]
    log_file = tmp_path / "debug.log"
    os.environ["SPARKCAP_CANARY_KEY"] = NIGHT_CANARY
    try:
        with (
            root_logging_into(log_file),
            SimServer([fast_profile("m")], required_api_key=NIGHT_CANARY) as sim,
        ):
            with pytest.raises(PreflightError, match="refused the credentials"):
                one_sweep(sim.endpoint, db_path)  # without the key nothing is measured
            with pytest.raises(PreflightError) as err:
                one_sweep(sim.endpoint, db_path, model="nope", api_key_env="SPARKCAP_CANARY_KEY")
    finally:
        del os.environ["SPARKCAP_CANARY_KEY"]
    assert NIGHT_CANARY not in str(err.value) and NIGHT_CANARY not in repr(err.value)
    assert log_file.stat().st_size > 0  # DEBUG logging really happened (httpx, httpcore)
    assert night.debug_log.stat().st_size > 0
    for text in (night.stdout, night.stderr, night.workers_stderr):
        assert NIGHT_CANARY not in text and NIGHT_CANARY_HEADER not in text
    places = [
        night.db,
        night.debug_log,
        log_file,
        *night.reports.rglob("*"),
        *night.home.rglob("*"),
        *db_path.parent.rglob("*"),
    ]
    assert any(p.suffix == ".html" for p in places)
    for place in places:
        if place.is_file():
            data = place.read_bytes()
            assert NIGHT_CANARY.encode() not in data, place
            assert NIGHT_CANARY_HEADER.encode() not in data, place


def test_custom_header_values_are_secrets(cli_sweeps: CliSweeps, tmp_path: Path) -> None:
    """`--header "x-api-key: …"` (Azure, Cloudflare Access) and `NAME:env:VAR` reach the server
    and nothing else: not raw.runs.config_json, the spool, the report or the CLI's output.
    The session's hand-made CLI sweeps send both forms (the simulator refuses a request missing
    either), and a sweep without the second is refused: each really travelled."""
    literal, from_env = LITERAL, FROM_ENV
    first, without = cli_sweeps.first, cli_sweeps.without
    assert first.returncode == 0, first.stderr  # the simulator answers 401 without either header
    assert cli_sweeps.second.returncode == 0, cli_sweeps.second.stderr
    assert without.returncode == 1 and "refused the credentials" in without.stderr
    outputs = [p.stdout + p.stderr for p in (first, cli_sweeps.second, cli_sweeps.again, without)]
    from sparkcap.publish.report import render_report

    db_path = cli_sweeps.db
    report = render_report(db_path, None, tmp_path / "reports", export_images=False)
    configs = [r[0] for r in q(db_path, "select config_json from raw.runs")]
    assert any("x-api-key" in c for c in configs)  # the header's name is kept ...
    home = cli_sweeps.home
    for place in [db_path, report.index, *home.rglob("*"), *(tmp_path / "reports").rglob("*")]:
        if place.is_file():
            data = place.read_bytes()
            assert literal.encode() not in data and from_env.encode() not in data, place
    for text in outputs + configs:
        assert literal not in text and from_env not in text  # ... never its value


def test_self_signed_certificate_fails_unless_ca_configured(db_path: Path, tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    with SimServer([fast_profile("m")], ssl_certfile=cert, ssl_keyfile=key) as sim:
        https = sim.endpoint
        with pytest.raises(PreflightError, match=r"certificate verify failed"):
            one_sweep(https, db_path)
        result = one_sweep(https, db_path, ca_bundle=cert)
    assert all(r.status.value == "ok" for w in result.waves for r in w.requests)  # type: ignore[attr-defined]


def test_redirects_are_not_followed(db_path: Path) -> None:
    from tests.integration.reliability.rawserver import RawServer

    def script(ordinal: int):  # type: ignore[no-untyped-def]
        yield b""

    class Redirect(RawServer):
        async def _handle(self, reader, writer):  # type: ignore[no-untyped-def]
            await reader.readuntil(b"\r\n\r\n")
            writer.write(
                b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:9/x\r\n"
                b"Content-Length: 0\r\n\r\n"
            )
            await writer.drain()
            writer.close()

    with Redirect(script) as srv:
        result = one_sweep(srv.endpoint, db_path, levels=(1,))
    (r,) = [r for w in result.waves for r in w.requests][:1]  # type: ignore[attr-defined]
    assert r.status.value == "server_error" and r.http_status == 307


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "name: x\nworkloads: {code: {}}\ndeployments:\n  - {name: a, model: m, endpoint: "
            "'http://h/v1', nodez: 2}\n",
            ":4: deployments.0.nodez: unknown key",
        ),
        (
            "name: x\nworkloads:\n  code: {levels: [1, -2]}\ndeployments:\n  - {name: a, model: m, "
            "endpoint: 'http://h/v1'}\n",
            ":3: workloads.code",
        ),
        (
            "name: x\nworkloads: {code: {trials: many}}\ndeployments:\n  - {name: a, model: m, "
            "endpoint: 'http://h/v1'}\n",
            ":2: workloads.code.trials",
        ),
        (
            "name: x\nworkloads: {code: {}}\ndeployments:\n  - {name: a, model: m}\n",
            "give exactly one of 'endpoint' or 'launch'",
        ),
        ("name: [unclosed\n", "invalid YAML"),
    ],
)
def test_malformed_fleet_files_give_one_line_with_location(
    text: str, needle: str, tmp_path: Path
) -> None:
    f = tmp_path / "fleet.yaml"
    message = fleet_load_error(f, text)
    assert needle in message and str(f) in message
    db = tmp_path / "x.duckdb"
    p = cli_in_process("run", "--fleet", str(f), "--db", str(db), "--no-prefect")
    assert p.returncode != 0
    assert len(p.stderr.strip().splitlines()) == 1 and p.stderr.startswith("error:")
    assert not db.exists()


def test_server_dying_mid_sweep_leaves_an_incomplete_but_usable_run(
    db_path: Path, tmp_path: Path
) -> None:
    from sparkcap.loadgen.sweep import new_run_id
    from sparkcap.transform.dbt_build import build

    sim = SimServer([fast_profile("m")]).start()
    killed = {"done": False}

    def progress(wave, done, total):  # type: ignore[no-untyped-def]
        if done == 2 and not killed["done"]:
            sim.stop()  # the server dies after the second wave
            killed["done"] = True

    req = SweepRequest(
        deployment=dep(sim.endpoint, "m"),
        workload="code",
        # 32-token streams (~0.3 s of decoding): a starved worker seldom spoils them (below)
        plan=SweepPlan(levels=(1, 2, 4), trials=1, max_tokens=32, max_remeasures=0),
    )
    result = asyncio.run(run_sweeps([req], db_path, progress=progress))
    assert result.status == "incomplete" and "stopped answering" in (result.reason or "")
    status, reason = q(db_path, "select status, status_reason from raw.runs")[0]
    n_waves = q(db_path, "select count(*) from raw.waves")[0][0]
    assert status == "incomplete" and "stopped answering" in reason
    assert n_waves == 3  # two finished waves and the one that found the server gone
    outcome = q(
        db_path, "select step, status, reason from raw.step_outcomes where deployment = 'm'"
    )
    assert len(outcome) == 1 and outcome[0][:2] == ("sweep", "failed")
    assert "stopped answering" in outcome[0][2]
    # the finished waves are reportable: the trials they hold are built and judged (the
    # selection this test reads, not a whole build)
    build(db_path, select="+fct_trials", dbt_vars=SHORT_STREAM_VARS)
    trials = q(
        db_path,
        "select concurrency, is_valid, invalid_reasons from marts.fct_trials "
        "where trial > 0 order by concurrency",
    )
    # level 1's trial alone (the warm-up never counts; level 2's wave found the server gone),
    # and nothing of the server's death in its verdict: valid, or spoiled only on the client's
    # side. A parallel worker starved for longer than a wave's decoding reads its timing bound
    # past even the relaxed 95 %, or reads a stream's buffered chunks at once under one stamp
    # (no measurable rate) — verdicts on the client, which this test is not about (with
    # 8-token streams under bursty load the valid count can be 0)
    assert [c for c, _, _ in trials] == [1], trials
    ((_, valid, reasons),) = trials
    client_side = ("client timing:", "client release:", "no measurable stream rate")
    assert valid or all(r.startswith(client_side) for r in str(reasons).split("; ")), trials
    # the next night runs normally
    with SimServer([fast_profile("m")]) as sim2:
        req2 = req.model_copy(update={"deployment": dep(sim2.endpoint, "m")})
        assert asyncio.run(run_sweeps([req2], db_path)).status == "complete"
    assert new_run_id() != result.run_id


@pytest.mark.client_timing
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6, 7, 8])
def test_multi_token_chunks_counted_by_usage_and_rate_matches_server_log(
    k: int, db_path: Path
) -> None:
    import httpx

    from sparkcap.servers.sim.server import SimProcess

    profile = {
        "model": "m",
        "step_s1": 0.05,
        "batch_slowdown": 0.0,
        "fixed_chunk_tokens": k,
        "prefill_tok_s": 100000,
    }
    # 40 decode steps (2 s) whatever k. The tolerance is the worst measured with
    # margin: at niceness -5 beside a saturated parallel phase the client can read 1.2 % (0.8 s
    # streams) and 2.1 % (2 s streams) slower than the server's log; at make test's -15, 10
    # runs beside 8 busy processes read 0.20 % at worst over 528 streams
    # (benchmarks/timing_spread.py)
    tokens = 40 * k + 1
    with SimProcess({"profiles": [profile]}) as sim:
        result = one_sweep(sim.endpoint, db_path, levels=(3,), max_tokens=tokens)
        log = {e["request_id"]: e for e in httpx.get(sim.base_url + "/sim/log").json()}
    for w in result.waves:  # type: ignore[attr-defined]
        for r in w.requests:
            s = log[r.request_id]
            assert r.completion_tokens == s["completion_tokens"] == tokens
            assert r.n_chunks == s["n_chunks"] == 41  # the first token, then 40 chunks of k
            # beyond what the wave itself says its loop's stalls may have put into a rate
            # (timing_error_bound, in the warehouse beside the trial): a stall the client saw
            # and reported is the product being honest, not wrong. Spread of this figure
            # (benchmarks/timing_spread.py -k multi_token): 20 runs beside 3 burners at
            # niceness 0, 960 streams, worst +0.17 %; 6 runs beside 2 burners at the tests'
            # own -15, 288 streams, worst +0.21 %. A rare outlier (3.5 % for one k=4 stream)
            # reproduces under neither load, so the failure message carries the wave's bound
            # and loop lag, which say whether the client or the server side stalled.
            own_bound = w.timing_error_bound or 0.0
            within(
                "|client rate / server log - 1| - timing error bound",
                abs(live_decode_tok_s(r) / s["decode_tok_s"] - 1) - own_bound,
                high=0.03,
                context=(
                    r.request_id,
                    live_decode_tok_s(r),
                    s["decode_tok_s"],
                    own_bound,
                    w.loop_lag_max_ms,
                ),
            )


def test_restaging_and_rebuilding_leave_identical_marts(db_path: Path) -> None:
    from sparkcap.store.connection import open_warehouse
    from sparkcap.store.staging import stage_wave
    from sparkcap.transform.dbt_build import build

    marts = ("fct_stream_rates", "fct_trials", "fct_levels", "fct_capacity", "fct_fleet_capacity")

    def snapshot() -> dict[str, object]:
        out: dict[str, object] = {}
        for t in (*marts, "raw.waves", "raw.requests", "raw.chunks"):
            name = t if "." in t else f"marts.{t}"
            cols = [
                c[0]
                for c in q(db_path, f"describe {name}")
                if c[0] not in ("run_watermark", "staged_at")
            ]
            rows = q(db_path, f"select {', '.join(cols)} from {name} order by all")
            out[t] = rows
        return out

    with SimServer([fast_profile("m")]) as sim:
        result = one_sweep(sim.endpoint, db_path, levels=(1, 2))
    # the marts compared and every model they are built from (with their data tests), not a
    # whole build twice
    compared = " ".join(f"+{m}" for m in marts)
    build(db_path, select=compared)
    before = snapshot()
    with open_warehouse(db_path) as con:  # a retried staging task stages every wave again
        for w in result.waves:  # type: ignore[attr-defined]
            stage_wave(con, w)
    build(db_path, select=compared)  # incremental: the run's watermark moved, so it is rebuilt
    assert snapshot() == before
