"""The nightly flow under Prefect: with the test harness, and scheduled by a real server."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.reliability.imperfect_nights import (
    DEAD,
    assert_the_night_names_the_dead_node,
)
from tests.paths import ROOT
from tests.support.fleets import write_fleet
from tests.support.queries import q, wave_census
from tests.support.servers import stop_process_group
from tests.support.sims import fast_profile, faulty
from tests.support.timing import RELAXED_TIMING

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _nightly():  # type: ignore[no-untyped-def]
    from sparkcap.night.schedule import load_nightly_flow

    return load_nightly_flow()


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    os.environ.setdefault("PREFECT_HOME", str(tmp_path_factory.mktemp("prefect")))
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def _artifacts(flow_run_id: object) -> dict[str, str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async def go() -> dict[str, str]:
        async with get_client() as client:
            arts = await client.read_artifacts(
                artifact_filter=ArtifactFilter(
                    flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])
                )
            )
        return {str(a.key): str(a.data) for a in arts}

    import asyncio

    return asyncio.run(go())


@pytest.mark.reliability
def test_flow_searches_when_asked_once_the_warehouse_is_free(canary_nights: CanaryNights) -> None:
    """Two things the canary module night proves besides (each was a night of its own, ~60
    CPU-s apiece, then one small night of its own):

    - `sparkcap run --search` reaches the flow as a parameter: the live deployment is searched
      (doubling to the highest level allowed), not swept on the fleet file's grid (1, 2);
    - the night holds the warehouse's one-slot global concurrency limit: while another night
      (here: the fixture) holds it, a night on the same DuckDB file waits, then runs."""
    from prefect.client.orchestration import get_client

    from sparkcap.night.schedule import ensure_warehouse_limit

    db = canary_nights.db
    methods = q(db, "select distinct method from marts.fct_capacity where deployment = 'live'")
    (levels,) = q(
        db,
        "select list(distinct concurrency order by concurrency) from marts.fct_search_path "
        "where deployment = 'live'",
    )[0]
    (started,) = q(db, "select min(started_at) from raw.runs")[0]
    # the search's levels, not the grid's (1, 2): 4 (max_level) by doubling (1 and 2 hold too
    # few stream rates for an interval and go up by their medians, ~100 tok/s; 4 clears), and
    # the level it then checks below the answer
    assert methods == [("search",)] and 4 in levels and max(levels) == 4, levels
    assert started >= canary_nights.other_night_released_at  # it began only after the other
    with get_client(sync_client=True) as client:
        limit = client.read_global_concurrency_limit_by_name(ensure_warehouse_limit(db))
    assert limit.limit == 1 and limit.active_slots == 0


def test_flow_records_data_quality_failure_and_still_publishes(
    canary_nights: CanaryNights,
) -> None:
    """The canary module night's ``bad`` deployment omits usage on every other stream: the
    night records the data-quality failure, ends Failed, and still publishes its report."""
    state, reports = canary_nights.ok, canary_nights.reports
    assert state.is_failed()
    assert "data quality failed" in (state.message or "")
    assert (reports / "latest" / "index.html").exists()
    arts = _artifacts(state.state_details.flow_run_id)
    assert "completion_length_present" in arts.get("data-quality", "")
    assert "capacity" in arts  # published: the good deployment's capacity is there


def test_scheduled_run_completes_on_a_real_prefect_server(prefect_api: str, tmp_path: Path) -> None:
    """`prefect deploy` from prefect.yaml, a worker on its pool, the server's scheduler: the
    session's server (tests/e2e/conftest.py, its scheduler loop at 2 s), not one of its own (a
    server's start-up and life cost ~25 CPU-s); the pool and deployment names are this test's
    alone there, and every query below is narrowed to this deployment's runs."""
    api = prefect_api
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_API_URL": api,
        "PREFECT_WORKER_QUERY_SECONDS": "2",
        "PREFECT_WORKER_PREFETCH_SECONDS": "2",
        "SPARKCAP_HOME": str(tmp_path / "home"),
        "DO_NOT_TRACK": "1",
    }
    env.pop("PREFECT_API_KEY", None)
    prefect = str(Path(sys.executable).parent / "prefect")
    worker_log = (tmp_path / "worker.log").open("wb")
    worker = None
    this_deployment = {"name": {"any_": ["nightly-twin"]}}
    try:

        def run(*args: str) -> str:
            p = subprocess.run(
                [prefect, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=180
            )
            assert p.returncode == 0, p.stdout + p.stderr
            return p.stdout

        run("work-pool", "create", "sparkcap-process", "--type", "process")
        # about the schedule, not the twin: one simulated deployment the night launches itself
        fleet = {
            "name": "scheduled",
            "workloads": {"code": {"levels": [1, 2], "trials": 1, "max_tokens": 16}},
            "deployments": [{"name": "qwen", "model": "qwen", "launch": {"kind": "sim"}}],
        }
        write_fleet(tmp_path / "scheduled.yaml", fleet)
        params = {
            "fleet": str(tmp_path / "scheduled.yaml"),
            "profile": "full",
            "db": str(tmp_path / "sched.duckdb"),
            "reports": str(tmp_path / "reports"),
        }
        run(
            "--no-prompt",
            "deploy",
            "--name",
            "nightly-twin",
            "--interval",
            "20",
            "--params",
            json.dumps(params),
        )
        worker = subprocess.Popen(
            [prefect, "worker", "start", "--pool", "sparkcap-process"],
            cwd=ROOT,
            env=env,
            stdout=worker_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 300
        states: list[str] = []
        paused = False
        while time.monotonic() < deadline:
            if not paused:
                # once the worker holds the first scheduled run, pause the schedule (Prefect
                # deletes the runs it planned after it): the interval plans runs for ever, and
                # a second night costs a whole build and validation (an anchored single run is
                # not used: it can go unpicked by the worker)
                taken = {
                    "flow_runs": {"state": {"type": {"any_": ["PENDING", "RUNNING"]}}},
                    "deployments": this_deployment,
                }
                held = httpx.post(f"{api}/flow_runs/filter", json=taken, timeout=10).json()
                deployments = [fr["deployment_id"] for fr in held if fr.get("deployment_id")]
                if deployments:  # (a subflow run has none)
                    dep = deployments[0]
                    r = httpx.post(f"{api}/deployments/{dep}/pause_deployment", timeout=10)
                    assert r.status_code < 300, r.text
                    paused = True
            finished = {
                "flow_runs": {"state": {"type": {"any_": ["COMPLETED", "FAILED", "CRASHED"]}}},
                "deployments": this_deployment,
                "limit": 20,
            }
            r = httpx.post(f"{api}/flow_runs/filter", json=finished, timeout=10)
            runs = r.json()
            states = [fr["state"]["type"] for fr in runs if fr.get("state")]
            if "COMPLETED" in states:
                break
            if "FAILED" in states or "CRASHED" in states:
                pytest.fail(
                    f"scheduled run failed: {states}\n"
                    + (tmp_path / "worker.log").read_text()[-3000:]
                )
            time.sleep(2)
        else:
            pytest.fail(
                f"no scheduled run completed: {states}\n"
                + (tmp_path / "worker.log").read_text()[-3000:]
            )
        assert (tmp_path / "reports" / "latest" / "index.html").exists()
    finally:
        stop_process_group(worker)
        worker_log.close()


GOOD_KEY, WRONG_KEY = "sk-canary-good-51c0e2d7a9", "sk-canary-wrong-83b6f4a1c2"
HEADER_VALUE = "hdr-canary-0d9e7c4b2a61"  # a custom header's value is a secret too


@dataclass(frozen=True)
class CanaryNights:
    ok: Any  # the right key: the night runs, a dead node and a busy database beside it
    refused: Any  # a wrong key: refused before anything is measured
    staging_attempts: int  # the ok night's calls of its staging task (the first fails)
    other_night_released_at: datetime  # when the night holding the warehouse let go
    reports: Path
    root: Path

    @property
    def db(self) -> Path:
        return self.root / "c.duckdb"


@contextlib.contextmanager
def busy_database_and_flaky_staging(attempts: list[str]) -> Iterator[None]:
    """A database busy for the whole sweep (every wave stays in the spool), and a staging
    task that then fails once: Prefect must retry it."""
    from sparkcap.errors import WarehouseBusy
    from sparkcap.night import steps as pipeline
    from sparkcap.store import spool

    real_stage_spool, real_stage_pending = spool.stage_spool, pipeline.stage_pending

    def busy_during_the_sweep(db_path, root=None, run_id=None):  # type: ignore[no-untyped-def]
        if run_id is not None:  # the sweep's wave-by-wave staging
            raise WarehouseBusy("injected: database is busy")
        return real_stage_spool(db_path, root, run_id)

    def flaky_stage_pending(db_path):  # type: ignore[no-untyped-def]
        attempts.append("try")
        if len(attempts) == 1:
            raise RuntimeError("injected staging failure")
        return real_stage_pending(db_path)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(spool, "stage_spool", busy_during_the_sweep)
        mp.setattr(pipeline, "stage_pending", flaky_stage_pending)
        yield


@contextlib.contextmanager
def another_night_holding(db: Path, released: dict[str, datetime]) -> Iterator[None]:
    """Another night holds the warehouse's one-slot concurrency limit for 4 s as this one
    starts: this one must wait for it."""
    import threading

    from prefect.concurrency.sync import concurrency

    from sparkcap.night.schedule import ensure_warehouse_limit

    name = ensure_warehouse_limit(db)
    held = threading.Event()

    def other_night() -> None:
        with concurrency(name, occupy=1, strict=True):
            held.set()
            time.sleep(4)
            released["at"] = datetime.now(UTC)

    t = threading.Thread(target=other_night)
    t.start()
    try:
        assert held.wait(30)
        yield
    finally:
        t.join()


@pytest.fixture(scope="module")
def canary_nights(harness: None, tmp_path_factory: pytest.TempPathFactory) -> CanaryNights:
    """Two Prefect nights on one warehouse, built once for the module and read by
    each test of it (a night apiece would cost a Prefect night each).

    - The right API key and custom header, on an imperfect fleet: ``dead`` (nobody listens
      on its port; its prompt-cache probe first), ``live`` (with a probe) and ``bad`` (omits
      usage on every other stream: a data-quality failure that must still publish), with the
      database busy for the whole sweep and the staging task failing once; searched (to 4
      streams), and started while another night holds the warehouse.
    - A wrong key: refused before anything is measured."""
    from sparkcap.servers.sim.server import SimServer

    root = tmp_path_factory.mktemp("canary")
    env = {
        "SPARKCAP_CANARY_GOOD": GOOD_KEY,
        "SPARKCAP_CANARY_WRONG": WRONG_KEY,
        "SPARKCAP_CANARY_HDR": HEADER_VALUE,
    }
    states, attempts = [], []
    released: dict[str, datetime] = {}
    # the keys' variables and, wider than a test (set up before the autouse fixture relaxes
    # the timing rule), the one timing setting itself (8-token streams: about secrets and
    # data quality)
    environment = pytest.MonkeyPatch()
    for k, v in {**env, **RELAXED_TIMING}.items():
        environment.setenv(k, v)
    probe = {"prompt-cache": {"document_tokens": 400, "warm_requests": 1}}
    dead = {
        "name": "dead",
        "model": "m",
        "endpoint": DEAD,
        "probes": probe,
        "timeouts": {"connect_s": 2},
    }
    try:
        with SimServer(
            [fast_profile("m"), faulty("bad", every=2, omit_usage=True)],
            required_api_key=GOOD_KEY,
            required_headers={"x-api-key": HEADER_VALUE},
        ) as sim:

            def deployment(name: str, model: str, var: str, **more: Any) -> dict[str, Any]:
                return {
                    "name": name,
                    "model": model,
                    "endpoint": sim.endpoint,
                    "api_key_env": var,
                    "header_env": {"x-api-key": "SPARKCAP_CANARY_HDR"},
                    **more,
                }

            good = "SPARKCAP_CANARY_GOOD"
            nights = [
                (
                    good,
                    [
                        dead,
                        deployment("live", "m", good, probes=probe),
                        deployment("bad", "bad", good),
                    ],
                    busy_database_and_flaky_staging(attempts),
                    {"max_level": 4, "trials_max": 1, "sustain_factor": 0},
                ),
                (
                    "SPARKCAP_CANARY_WRONG",
                    [deployment("live", "m", "SPARKCAP_CANARY_WRONG")],
                    contextlib.nullcontext(),
                    None,
                ),
            ]
            for var, deployments, imperfections, search in nights:
                fleet = {
                    "name": "canary",
                    "workloads": {"code": {"levels": [1, 2], "trials": 1, "max_tokens": 8}},
                    "deployments": deployments,
                }
                path = root / f"{var}.yaml"
                write_fleet(path, fleet)
                with contextlib.ExitStack() as imperfect:
                    imperfect.enter_context(imperfections)
                    if search is not None:
                        imperfect.enter_context(another_night_holding(root / "c.duckdb", released))
                    states.append(
                        _nightly()(
                            fleet=str(path),
                            db=str(root / "c.duckdb"),
                            profile="full",
                            reports=str(root / "reports"),
                            search=search,
                            return_state=True,
                        )
                    )
    finally:
        environment.undo()
    ok, refused = states
    return CanaryNights(
        ok=ok,
        refused=refused,
        staging_attempts=len(attempts),
        other_night_released_at=released["at"],
        reports=root / "reports",
        root=root,
    )


@pytest.mark.reliability
def test_a_prefect_night_with_a_dead_node_and_a_busy_database_publishes_the_rest(
    canary_nights: CanaryNights,
) -> None:
    """A dead node and a database busy for the whole sweep whose staging task then fails
    once, in one Prefect night: Prefect retries the staging; the warehouse ends with every
    wave of the live deployment exactly once and whole; the night ends Failed after
    publishing, naming the dead node (and the data-quality failure beside it)."""
    from sparkcap.store import spool

    state, db = canary_nights.ok, canary_nights.db
    assert canary_nights.staging_attempts == 2  # failed once, retried once
    assert state.is_failed()
    assert "dead not measured: endpoint unreachable" in (state.message or "")
    assert (canary_nights.reports / "latest" / "index.html").exists()
    (run_id,) = q(db, "select distinct run_id from raw.waves")[0]
    # `bad` omits usage on every other stream: every trial lacks a count, so it is not
    # measured either (data quality)
    assert_the_night_names_the_dead_node(
        db, canary_nights.reports / str(run_id) / "index.html", also_unmeasured="bad, "
    )
    n_waves, bad = wave_census(db)
    (n_distinct,) = q(db, "select count(distinct wave_id) from raw.waves")[0]
    (n_live,) = q(db, "select count(*) from raw.waves where deployment = 'live' and probe is null")[
        0
    ]
    planned = 2 * (1 + 1)  # the search's first two levels x (warm-up + one trial), or more
    assert n_waves == n_distinct and n_live >= planned and bad == 0
    assert spool.pending(db) == []


@pytest.mark.reliability
def test_canary_api_key_reaches_no_prefect_record(canary_nights: CanaryNights) -> None:
    """Secrets stay out of what Prefect keeps: artifacts, run logs, state messages, its database
    and result storage, for a night that ran (and failed data quality on another deployment)
    and for a night that fails on a wrong key."""
    import asyncio

    import prefect.settings
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker

    good, wrong, header = GOOD_KEY, WRONG_KEY, HEADER_VALUE
    ok, refused = canary_nights.ok, canary_nights.refused
    states = [ok, refused]
    # the right key was sent (the simulator demands it): every stream of `live` was answered
    statuses = q(
        canary_nights.db,
        "select distinct r.status from raw.requests r join raw.waves w using (wave_id) "
        "where w.deployment = 'live' and w.probe is null",
    )
    assert statuses == [("ok",)], statuses
    assert refused.is_failed() and "refused the credentials" in (refused.message or "")
    APILogWorker.drain_all(timeout=10)  # run logs reach the API in batches

    async def records() -> list[str]:
        out: list[str] = []
        async with get_client() as client:
            for state in states:
                run_id = state.state_details.flow_run_id
                logs = await client.read_logs(
                    log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id]))
                )
                out += [log.message for log in logs]
                run = await client.read_flow_run(run_id)
                out += [run.model_dump_json()]
                for tr in await client.read_task_runs():
                    out += [tr.model_dump_json()]
        return out

    texts = asyncio.run(records())
    assert any("refused the credentials" in t for t in texts)  # the failure's logs were read
    assert any("c=2" in t for t in texts)  # and the good night's progress lines
    arts = _artifacts(ok.state_details.flow_run_id)
    texts += list(arts.values()) + [str(s.message) for s in states]
    assert "capacity" in arts
    for text in texts:
        assert good not in text and wrong not in text and header not in text
    db_url = str(prefect.settings.PREFECT_SERVER_DATABASE_CONNECTION_URL.value())
    prefect_db = Path(db_url.split(":///", 1)[1])
    files = [
        *prefect_db.parent.glob(prefect_db.name + "*"),
        *Path(os.environ["PREFECT_HOME"]).rglob("*"),
        *canary_nights.root.rglob("*"),
    ]
    assert prefect_db.exists() and len(files) > 5
    for f in files:
        if f.is_file():
            data = f.read_bytes()
            assert good.encode() not in data and wrong.encode() not in data, f
            assert header.encode() not in data, f
