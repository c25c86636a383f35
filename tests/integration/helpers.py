from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import duckdb

from sparkcap.config.deployment import Deployment, Timeouts
from sparkcap.config.plan import SweepPlan
from sparkcap.loadgen.records import WaveRecord
from sparkcap.loadgen.sweep import new_run_id, run_sweep
from sparkcap.servers.sim.engine import SimFaults, SimProfile

# dbt vars for tests whose 0.1–0.2 s streams share a process (and the GIL) with the simulator
# and a machine with the rest of the suite: their timestamps are a few ms late, a few per cent
# of such a short stream's rate, and the timing rule (0.5 %) would rightly invalidate them.
# These tests are about something else, so the rule is as loose as a sweep takes (a tolerance
# must stay below 1): at 0.5 a 16-token wave read a 68 % error bound once, beside the suite's
# three workers and two other test runs, and its data-quality test failed on client timing.
SHORT_STREAM_VARS: dict[str, object] = {
    "timing_error_tolerance": 0.95,
    "start_skew_tolerance": 0.95,
}
# the same for a CLI in a subprocess: its capture (re-measure) and its build both read it
RELAXED_TIMING: dict[str, str] = {"SPARKCAP_DBT_VARS": json.dumps(SHORT_STREAM_VARS)}

# trials per level in the shared twin night (conftest.twin_night)
TWIN_TRIALS = 3


def fast_profile(model: str = "m", **kw: Any) -> SimProfile:
    """A quick engine: ~100 tok/s at one stream, so tests finish in seconds."""
    base: dict[str, Any] = dict(
        model=model, step_s1=0.02, batch_slowdown=0.1, draft_tokens=2, prefill_tok_s=50_000
    )
    base.update(kw)
    return SimProfile(**base)


def faulty(model: str, **faults: Any) -> SimProfile:
    return fast_profile(model, faults=SimFaults(**faults))


def dep(endpoint: str, model: str = "m", **kw: Any) -> Deployment:
    return Deployment(name=model, endpoint=endpoint, model=model, **kw)  # type: ignore[arg-type]


def sweep(
    endpoint: str,
    model: str = "m",
    workload: str = "code",
    levels: tuple[int, ...] = (2,),
    trials: int = 1,
    max_tokens: int = 20,
    warmup: bool = False,
    timeouts: Timeouts | None = None,
    max_remeasures: int = 0,
    **dep_kw: Any,
) -> list[WaveRecord]:
    """One wave per planned item unless ``max_remeasures`` says otherwise: these tests look at
    what single waves recorded, and their 0.2 s streams are too short for a 0.5 % timing
    tolerance anyway."""
    d = dep(endpoint, model, timeouts=timeouts or Timeouts(), **dep_kw)
    plan = SweepPlan(
        levels=levels,
        trials=trials,
        warmup=warmup,
        max_tokens=max_tokens,
        max_remeasures=max_remeasures,
    )
    return asyncio.run(run_sweep(d, workload, plan, new_run_id()))


def wave_census(db: Path) -> tuple[int, int]:
    """(waves stored, waves whose requests or chunks are not all there)."""
    with duckdb.connect(str(db)) as con:
        row = con.execute("""
            with r as (select wave_id, count(*) n, sum(n_chunks) chunks from raw.requests
                       group by 1),
                 c as (select q.wave_id, count(*) n from raw.chunks ch
                       join raw.requests q using (request_id) group by 1)
            select count(*), count(*) filter (where r.n is distinct from w.n_requests
                                              or c.n is distinct from r.chunks)
            from raw.waves w left join r using (wave_id) left join c using (wave_id)
        """).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def one_deployment_fleet(
    tmp_path: Path,
    name: str,
    endpoint: str,
    *,
    levels: list[int],
    trials: int,
    max_tokens: int,
    deployment: str = "m",
) -> Path:
    """A fleet file with one deployment of model ``m`` at ``endpoint`` and one code workload."""
    import yaml

    fleet = {
        "name": name,
        "workloads": {"code": {"levels": levels, "trials": trials, "max_tokens": max_tokens}},
        "deployments": [{"name": deployment, "model": "m", "endpoint": endpoint}],
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(fleet))
    return path


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``python -m sparkcap.cli ARGS`` in a child process, output captured as text: for what
    only a process shows (its exit status as the shell sees it, argv and environment parsing
    from scratch, signals, a terminal, what a killed one leaves). A test about what a command
    does takes :func:`cli_in_process`."""
    return subprocess.run(
        [sys.executable, "-m", "sparkcap.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env if env is not None else dict(os.environ),
    )


def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on (for a server that takes a fixed port)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_prefect_api(api: str, log: Path, timeout_s: float) -> None:
    """Until a ``prefect server`` started in a test answers its health check; a server that
    never does fails the test with the tail of its log."""
    import time

    import httpx
    import pytest

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail("prefect server did not start: " + log.read_text(errors="replace")[-3000:])


def cli_in_process(
    *args: str, env: dict[str, str] | None = None, timeout: float = 600
) -> CompletedProcess[str]:
    """``sparkcap ARGS`` in this process (``cli.main``), with ``env`` as the whole environment
    while it runs, its output captured as text and its exit status as a child's would be.

    Why: a child process pays ~7 s of CPU importing dbt, Great Expectations and Prefect and
    parsing the dbt project again; a pytest worker has them already. The command is the same
    code a person runs, from the parsing of its arguments on; what only a process shows keeps
    :func:`run_cli`. An exception the command does not turn into an error line is raised
    here, where a child would have printed its traceback and exited 1; so is
    ``TimeoutError`` from a command still running after ``timeout`` seconds (the child's
    ``TimeoutExpired``), where the test runs in the main thread, as pytest runs it."""
    import io
    import signal
    import threading
    from contextlib import redirect_stderr, redirect_stdout

    from sparkcap import cli

    def too_long(*_: object) -> None:
        raise TimeoutError(f"sparkcap {' '.join(args)} still running after {timeout:g} s")

    timed = threading.current_thread() is threading.main_thread()
    saved = dict(os.environ)
    out, err = io.StringIO(), io.StringIO()
    code: int = 0
    previous = signal.signal(signal.SIGALRM, too_long) if timed else None
    try:
        if timed:
            signal.setitimer(signal.ITIMER_REAL, timeout)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        with redirect_stdout(out), redirect_stderr(err):
            try:
                cli.main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        if timed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        os.environ.clear()
        os.environ.update(saved)
    return CompletedProcess(["sparkcap", *args], code, out.getvalue(), err.getvalue())
