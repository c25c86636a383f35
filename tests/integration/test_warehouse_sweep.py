"""Sweep the simulator over loopback into a real DuckDB file and check the rows."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import duckdb
import pytest

from sparkcap.config.plan import SweepPlan, SweepRequest
from sparkcap.errors import PreflightError
from sparkcap.night.sweeps import run_sweeps
from sparkcap.servers.sim.server import SimServer
from sparkcap.store.connection import open_warehouse
from sparkcap.store.staging import stage_wave
from tests.integration.cli_sweeps import CliSweeps
from tests.support.cli import cli_in_process, sweep_args
from tests.support.queries import q
from tests.support.sims import dep, fast_profile, faulty

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sim() -> SimServer:
    with SimServer([fast_profile("m"), faulty("cut", every=3, cut_after_tokens=5)]) as s:
        yield s


def _run(
    sim: SimServer, db: Path, model: str = "m", levels: tuple[int, ...] = (1, 3), trials: int = 2
) -> str:
    req = SweepRequest(
        deployment=dep(sim.endpoint, model, api_key_env="SPARKCAP_TEST_KEY"),
        workload="prose",
        plan=SweepPlan(levels=levels, trials=trials, max_tokens=15, max_remeasures=0),
    )
    return asyncio.run(run_sweeps([req], db)).run_id


def test_rows_match_the_contract(sim: SimServer, db_path: Path) -> None:
    run_id = _run(sim, db_path)
    with open_warehouse(db_path, read_only=True) as con:
        (status, cfg, finished) = con.execute(
            "select status, config_json, finished_at from raw.runs where run_id = ?", [run_id]
        ).fetchone()
        assert status == "complete" and finished is not None
        assert json.loads(cfg)["sweeps"][0]["deployment"]["api_key_env"] == "SPARKCAP_TEST_KEY"
        waves = con.execute(
            "select concurrency, trial, n_requests from raw.waves where run_id = ? "
            "order by concurrency, trial",
            [run_id],
        ).fetchall()
        assert waves == [(1, 0, 1), (1, 1, 1), (1, 2, 1), (3, 0, 3), (3, 1, 3), (3, 2, 3)]
        n_req, n_ok, distinct = con.execute(
            "select count(*), count(*) filter (where status = 'ok'), count(distinct request_id) "
            "from raw.requests where run_id = ?",
            [run_id],
        ).fetchone()
        assert n_req == distinct == 12 and n_ok == 12
        # every request's chunk rows: seq 0..n-1, increasing times, first/last agree
        bad = con.execute(
            """
            select count(*) from raw.requests r
            join (select request_id, count(*) n, min(t_ns) t0, max(t_ns) t1, max(seq) mx,
                         bool_and(n_tokens is null) no_counts
                  from raw.chunks group by 1) c using (request_id)
            where r.run_id = ? and (c.n <> r.n_chunks or c.t0 <> r.first_token_ns
                  or c.t1 <> r.last_token_ns or c.mx <> c.n - 1 or not c.no_counts)
            """,
            [run_id],
        ).fetchone()[0]
        assert bad == 0
        assert (
            con.execute(
                "select count(*) from raw.server_metrics m join raw.waves w using (wave_id) "
                "where w.run_id = ? and m.name = 'sim:generation_tokens_total' "
                "and element_at(m.label_map, 'model_name')[1] = 'm' "
                'and m.labels = \'{"model_name":"m"}\'',
                [run_id],
            ).fetchone()[0]
            == 12
        )  # before + after for each of 6 waves


@pytest.mark.reliability
def test_restaging_a_wave_never_duplicates(sim: SimServer, db_path: Path) -> None:
    run_id = _run(sim, db_path, levels=(2,), trials=1)
    with open_warehouse(db_path) as con:
        counts = [
            con.execute(f"select count(*) from raw.{t}").fetchone()[0]
            for t in ("waves", "requests", "chunks", "server_metrics")
        ]
        wave_ids = [r[0] for r in con.execute("select wave_id from raw.waves").fetchall()]
    # rebuild WaveRecords from the first run is not needed: stage a fresh sweep under same ids
    from sparkcap.loadgen.sweep import run_sweep

    waves = asyncio.run(
        run_sweep(
            dep(sim.endpoint, "m"),
            "prose",
            SweepPlan(levels=(2,), trials=1, max_tokens=15, max_remeasures=0),
            run_id,
        )
    )
    assert sorted(w.wave_id for w in waves) == sorted(wave_ids)
    with open_warehouse(db_path) as con:
        for _ in range(2):
            for w in waves:
                stage_wave(con, w)
        again = [
            con.execute(f"select count(*) from raw.{t}").fetchone()[0]
            for t in ("waves", "requests", "chunks")
        ]
    assert again[:2] == counts[:2]


def test_failed_streams_are_kept_with_partial_chunks(sim: SimServer, db_path: Path) -> None:
    run_id = _run(sim, db_path, model="cut", levels=(3,), trials=1)
    rows = q(
        db_path,
        "select status, n_chunks, error from raw.requests where run_id = ? and wave_id like "
        "'%/t1' order by stream_index",
        [run_id],
    )
    assert sorted(r[0] for r in rows) == ["ok", "ok", "truncated"]
    assert all(r[1] > 0 for r in rows)


def test_unknown_model_fails_preflight_and_writes_nothing(sim: SimServer, db_path: Path) -> None:
    with pytest.raises(PreflightError, match="unknown model 'nope'"):
        _run(sim, db_path, model="nope")
    assert not db_path.exists()


def test_unreachable_endpoint_fails_preflight(db_path: Path) -> None:
    req = SweepRequest(deployment=dep("http://127.0.0.1:9/v1", "m"), workload="code")
    with pytest.raises(PreflightError, match="unreachable"):
        asyncio.run(run_sweeps([req], db_path))
    assert not db_path.exists()


def test_cli_sweep_then_sql(cli_sweeps: CliSweeps) -> None:
    """`sparkcap sweep` (the session's first hand-made CLI sweep, in a child process), then
    `sparkcap sql` on what it recorded (its run, whose second deployment joined later)."""
    p, db_path = cli_sweeps.first, cli_sweeps.db
    assert p.returncode == 0, p.stderr
    assert "run id:" in p.stdout and "capacity at 20 tok/s" in p.stdout
    mine = f"waves.run_id = '{cli_sweeps.joined_run}' and waves.deployment = 'a'"
    q = cli_in_process(
        "sql",
        "select concurrency, count(*) n from raw.requests join raw.waves "
        f"using (wave_id) where trial > 0 and {mine} group by 1 order by 1",
        "--db",
        str(db_path),
        "--format",
        "json",
    )
    assert q.returncode == 0, q.stderr
    assert json.loads(q.stdout) == [{"concurrency": 1, "n": 1}, {"concurrency": 2, "n": 2}]
    c = cli_in_process(
        "sql",
        f"select count(*) as n from raw.waves where {mine}",
        "--db",
        str(db_path),
        "--format",
        "csv",
    )
    assert c.stdout.splitlines() == ["n", "4"]


def test_sql_is_read_only(sim: SimServer, db_path: Path) -> None:
    _run(sim, db_path, levels=(1,), trials=1)
    p = cli_in_process("sql", "delete from raw.waves", "--db", str(db_path))
    assert p.returncode == 1
    assert p.stderr.startswith("error: SQL failed") and len(p.stderr.strip().splitlines()) == 1
    with duckdb.connect(str(db_path), read_only=True) as con:
        assert con.execute("select count(*) from raw.waves").fetchone()[0] == 2


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            [
                *sweep_args("http://127.0.0.1:9/v1"),
                "--levels",
                "0,2",
            ],
            "levels",
        ),
        (
            [
                *sweep_args("http://127.0.0.1:9/v1", "m", "poetry"),
            ],
            "is not one of 'code', 'prose'",
        ),
        (sweep_args("not a url"), "endpoint"),
        (
            [
                *sweep_args("http://127.0.0.1:9/v1"),
                "--trials",
                "x",
            ],
            "trials",
        ),
        (
            sweep_args("http://127.0.0.1:9/v1"),
            "unreachable",
        ),
        (["sql", "select 1", "--db", "/nonexistent/x.duckdb"], "no warehouse"),
    ],
)
def test_bad_input_gives_one_error_line(args: list[str], needle: str, tmp_path: Path) -> None:
    if "--db" not in args:
        args = [*args, "--db", str(tmp_path / "x.duckdb")]
    p = cli_in_process(*args)
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), p.stderr
    assert needle in lines[0]
    assert not (tmp_path / "x.duckdb").exists()


def test_older_warehouse_gains_new_columns(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    with duckdb.connect(str(db_path)) as con:
        con.execute("create schema raw")
        con.execute("create table raw.waves (wave_id varchar, run_id varchar)")
        con.execute("insert into raw.waves values ('w', 'r')")
    with open_warehouse(db_path) as con:
        cols = [
            r[0]
            for r in con.execute(
                "select column_name from information_schema.columns "
                "where table_schema = 'raw' and table_name = 'waves'"
            ).fetchall()
        ]
        assert {"staged_at", "queued", "peak_concurrency", "concurrency"} <= set(cols)
        assert con.execute("select wave_id, staged_at from raw.waves").fetchall() == [("w", None)]


def test_a_warehouse_from_before_0_2_is_upgraded_in_place(sim: SimServer, db_path: Path) -> None:
    """0.1 made ``client_saturated`` NOT NULL and had no timing columns: its file keeps its
    nights and takes new waves, whose capture-time verdict is NULL."""
    from sparkcap.store.schema import SCHEMA_SQL

    old = SCHEMA_SQL.replace(
        "client_saturated       boolean,", "client_saturated       boolean not null,"
    )
    old = (
        old[: old.index("    probe                  varchar,")]
        + "    probe varchar\n);"
        + (old[old.index("create table if not exists raw.requests") - 2 :])
    )
    db_path.parent.mkdir(parents=True)
    with duckdb.connect(str(db_path)) as con:
        con.execute(old)
        con.execute(
            "insert into raw.waves (wave_id, run_id, deployment, model, endpoint, workload, "
            "concurrency, trial, started_at, client_saturated, n_requests) values "
            "('old', 'r0', 'm', 'm', 'http://x/v1', 'code', 1, 1, now(), true, 1)"
        )
        assert "timing_error_bound" not in {
            r[0] for r in con.execute("describe raw.waves").fetchall()
        }
    _run(sim, db_path, levels=(1,), trials=1)
    rows = q(
        db_path,
        "select wave_id = 'old', client_saturated, timing_error_bound is not null, attempt "
        "from raw.waves order by wave_id = 'old' desc, wave_id",
    )
    assert rows[0] == (True, True, False, None)  # the old night is kept as it was
    assert all(r[1] is None and r[2] and r[3] == 1 for r in rows[1:] if r[0] is False)
    assert len(rows) == 3  # the old wave, a warm-up and one trial


@pytest.mark.reliability
def test_metrics_scrape_uses_the_deployments_auth_and_records_every_failure(
    cli_sweeps: CliSweeps, tmp_path: Path
) -> None:
    """A server whose /metrics sits behind the same key as its API is scraped with that key;
    a metrics URL nobody answers is recorded on every wave (never silently switched off) and
    the report says whose server metrics are missing."""
    from sparkcap.publish.report import render_report

    db_path, run_id = cli_sweeps.db, cli_sweeps.metrics_run
    rows = dict(
        q(
            db_path,
            "select w.deployment, count(m.wave_id) from raw.waves w "
            "left join raw.server_metrics m using (wave_id) where w.run_id = ? group by 1",
            [run_id],
        )
    )
    errors = q(
        db_path,
        "select deployment, metrics_error from raw.waves where run_id = ? order by wave_id",
        [run_id],
    )
    (labels,) = q(
        db_path,
        "select element_at(m.label_map, 'model_name')[1] from raw.server_metrics m "
        "join raw.waves w using (wave_id) where w.run_id = ? limit 1",
        [run_id],
    )
    assert rows["m"] > 0 and rows["blind"] == 0
    assert labels == ("m",)  # labels are stored structured
    assert all(e is None for d, e in errors if d == "m")
    blind_errors = [e for d, e in errors if d == "blind"]
    assert len(blind_errors) == 4 and all("ConnectError" in (e or "") for e in blind_errors)
    # staged in the session's hand-made CLI warehouse: the CLI's sweeps built it
    assert cli_sweeps.first.returncode == 0, cli_sweeps.first.stderr
    html = render_report(db_path, run_id, tmp_path / "r", export_images=False).index.read_text()
    assert "Server metrics missing" in html and "blind" in html
