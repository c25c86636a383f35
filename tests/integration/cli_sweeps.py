"""Hand-made sweeps into one warehouse, once per test session, built by the CLI's own two
sweeps and read by the tests of four modules (a warehouse apiece would cost a whole dbt build
each):

- three runs made apart (``a``, ``b``, ``a`` again) that one report reads as one
  (``test_combined_report``);
- a run of a server whose /metrics sits behind the API's key, beside a deployment whose metrics
  URL nobody answers (``test_warehouse_sweep``'s metrics test);
- then `sparkcap sweep --model a` in a child process (the run the SQL test queries), and
  `sparkcap sweep --model b --run latest` into its run (``test_combined_report``); sweeping
  ``a`` into it again is refused;
- every request to the hand-made server carries a literal custom header and one read from a
  variable (the simulator refuses a request missing either), whose values must reach nothing
  but the server (``test_guarantees``); a sweep without the second is refused.

The sweeps run with the timing rule relaxed and streams of 64 tokens (~0.6 s of decoding):
about the runs, reports, SQL and secrets, not the client's timing. 12-token streams (~0.1 s)
are too short: the first CLI sweep, a child process that may start while the llama-server
compile holds both cores, can read a timing error bound of 136 % at level 1, leaving no valid
measurement, exit 1, and every reader failing."""

from __future__ import annotations

import asyncio
import os
import re
from dataclasses import dataclass
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from sparkcap.config.deployment import Deployment
from sparkcap.config.plan import SweepPlan, SweepRequest
from sparkcap.night.sweeps import run_sweeps
from sparkcap.servers.sim.server import SimServer
from tests.support.cli import cli_in_process, run_cli
from tests.support.sims import fast_profile
from tests.support.timing import RELAXED_TIMING

LITERAL, FROM_ENV = "hdr-literal-6a1f0c93e2b7", "hdr-env-2c8d5e71b4f0"
HEADER_VAR = "SPARKCAP_CANARY_HDR"
METRICS_KEY_VAR, METRICS_KEY = "SPARKCAP_METRICS_KEY", "sk-metrics-test"
TOKENS = 64  # each stream's output: ~0.6 s of decoding at the simulator's ~100 tok/s
HEADER_ARGS = ["--header", f"x-api-key: {LITERAL}", "--header", f"api-key: env:{HEADER_VAR}"]


@dataclass(frozen=True)
class CliSweeps:
    db: Path
    home: Path  # the CLI's SPARKCAP_HOME
    env: dict[str, str]  # the CLI's environment
    separate: list[str]  # a, b, a again: each a run of its own, staged without a build
    metrics_run: str  # staged: `m` behind the key, `blind` with a dead metrics URL
    first: CompletedProcess[str]  # child: `sparkcap sweep --model a` (both headers): built
    second: CompletedProcess[str]  # `sparkcap sweep --model b --run latest`: built
    again: CompletedProcess[str]  # `sparkcap sweep --model a --run RUN`: refused
    without: CompletedProcess[str]  # `sparkcap sweep --model a` missing a header: refused

    @property
    def joined_run(self) -> str:
        found = re.search(r"run id: (\S+)", self.first.stdout)
        assert found is not None, self.first.stdout + self.first.stderr
        return found[1]

    def cli(self, *args: str) -> CompletedProcess[str]:
        return cli_in_process(*args, env=self.env)


def _staged(endpoint: str, model: str, levels: tuple[int, ...], db: Path) -> str:
    plan = SweepPlan(levels=levels, trials=1, warmup=False, max_tokens=TOKENS, max_remeasures=0)
    deployment = Deployment(
        name=model,
        endpoint=endpoint,  # type: ignore[arg-type]
        model=model,
        headers={"x-api-key": LITERAL},  # type: ignore[dict-item]
        header_env={"api-key": HEADER_VAR},
    )
    req = SweepRequest(deployment=deployment, workload="code", plan=plan)
    return asyncio.run(run_sweeps([req], db)).run_id


def _metrics_run(db: Path) -> str:
    with SimServer([fast_profile("m")], required_api_key=METRICS_KEY) as guarded:
        plan = SweepPlan(levels=(1, 2), trials=1, max_tokens=8, max_remeasures=0)
        deployments = [
            Deployment(
                name=name,
                endpoint=guarded.endpoint,  # type: ignore[arg-type]
                model="m",
                api_key_env=METRICS_KEY_VAR,
                **more,  # type: ignore[arg-type]
            )
            for name, more in (("m", {}), ("blind", {"metrics_url": "http://127.0.0.1:9/metrics"}))
        ]
        reqs = [SweepRequest(deployment=d, workload="code", plan=plan) for d in deployments]
        return asyncio.run(run_sweeps(reqs, db)).run_id


def run_cli_sweeps(root: Path) -> CliSweeps:
    db, home = root / "h.duckdb", root / "home"
    required = {"x-api-key": LITERAL, "api-key": FROM_ENV}
    with pytest.MonkeyPatch.context() as staging:
        # one environment for the staged runs and the CLI's: one home (spool, logs) to search
        # for secrets
        night = {HEADER_VAR: FROM_ENV, METRICS_KEY_VAR: METRICS_KEY, "SPARKCAP_HOME": str(home)}
        for k, v in {**RELAXED_TIMING, **night}.items():
            staging.setenv(k, v)
        env = dict(os.environ)
        metrics_run = _metrics_run(db)
        with SimServer([fast_profile("a"), fast_profile("b")], required_headers=required) as sim:
            separate = [
                _staged(sim.endpoint, "a", (1, 2), db),
                _staged(sim.endpoint, "b", (1, 2, 4), db),
                _staged(sim.endpoint, "a", (1,), db),  # a again, later: the newest counts
            ]
            common = ["--endpoint", sim.endpoint, "--workload", "code", "--levels", "1,2"]
            common += ["--trials", "1", "--max-tokens", str(TOKENS), "--max-remeasures", "0"]
            common += ["--db", str(db)]
            # a child process: its whole stdout and stderr, the load-generating process's
            # included, are what must not hold the headers' values
            first = run_cli("sweep", "--model", "a", *common, *HEADER_ARGS, env=env, timeout=300)
            found = re.search(r"run id: (\S+)", first.stdout)
            run_id = found[1] if found else "?"

            def cli(*args: str) -> CompletedProcess[str]:
                return cli_in_process(*args, env=env)

            second = cli("sweep", "--model", "b", "--run", "latest", *common, *HEADER_ARGS)
            again = cli("sweep", "--model", "a", "--run", run_id, *common, *HEADER_ARGS)
            without = cli("sweep", "--model", "a", *common, *HEADER_ARGS[:2])
    return CliSweeps(
        db=db,
        home=home,
        env=env,
        separate=separate,
        metrics_run=metrics_run,
        first=first,
        second=second,
        again=again,
        without=without,
    )
