"""Every capacity the CLI prints is the mart's, at the fleet file's own threshold; and what a
person sees of that night in a terminal: the first line at once, live progress while it runs.

The deployment is built so that the answer depends on the threshold: its median rates at the
tested levels are about 50, 23, 16 and 12.5 tok/s, so at 15 tok/s it sustains 6 streams and at
the default 20 only 4. A CLI that applied its own rule, or the default threshold, would print
another number than ``marts.fct_capacity``.

One night, run once in a pseudo-terminal, read by both tests (a night apiece would
cost a whole night, build and validation each). The simulated rates sit near the threshold:
beside the parallel workers and a CPU burner a starved simulator misses its schedule (23 -> 17
tok/s; a bucket dip gone), so the night runs with the timing tests, alone (both tests are
marked ``client_timing`` for that; the terminal test's own bound is generous).
"""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparkcap.servers.sim.server import SimServer
from tests.spread import within
from tests.support.fleets import write_fleet
from tests.support.queries import q
from tests.support.sims import fast_profile

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.client_timing]

CAPACITY_LINE = re.compile(r"^capacity at (\S+) tok/s — (\w+)/(\w+): (.*)$")
FLEET_LINE = re.compile(r"^fleet capacity at (\S+) tok/s — (\w+): (\d+) streams")
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\r")


@dataclass(frozen=True)
class TerminalNight:
    returncode: int
    seen: list[tuple[float, bytes]]  # (seconds since the start, what the terminal received)
    db: Path

    @property
    def text(self) -> str:
        return ANSI.sub(b"", b"".join(chunk for _, chunk in self.seen)).decode("utf-8", "replace")

    def first(self, pattern: bytes) -> float:
        """When the terminal first showed ``pattern``, in seconds since the command started."""
        text = b""
        for t, chunk in self.seen:
            text += ANSI.sub(b"", chunk)
            if re.search(pattern, text):
                return t
        raise AssertionError(f"{pattern!r} never shown: {text[-2000:]!r}")


@pytest.fixture(scope="module")
def night(tmp_path_factory: pytest.TempPathFactory) -> TerminalNight:
    """`sparkcap run --fleet t15.yaml --no-prefect` on a terminal 80 columns wide."""
    tmp_path = tmp_path_factory.mktemp("threshold")
    # one token per 20 ms step at one stream, each extra stream slows the step by 40 %
    profile = fast_profile("m", step_s1=0.02, batch_slowdown=0.4, draft_tokens=0)
    db = tmp_path / "t.duckdb"
    env = {
        **os.environ,
        "SPARKCAP_HOME": str(tmp_path / "home"),
        "SPARKCAP_DB": str(db),
        "SPARKCAP_REPORTS": str(tmp_path / "reports"),
        "COLUMNS": "80",
    }
    with SimServer([profile]) as sim:
        fleet = tmp_path / "t15.yaml"
        write_fleet(
            fleet,
            {
                "name": "t15",
                "threshold_tok_s": 15,
                "workloads": {
                    wl: {"levels": [1, 4, 6, 8], "trials": 1, "max_tokens": 40, "warmup": False}
                    for wl in ("code", "prose")
                },
                "deployments": [{"name": "m", "model": "m", "endpoint": sim.endpoint}],
            },
        )
        master, slave = pty.openpty()
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "sparkcap.cli", "run", "--fleet", str(fleet), "--no-prefect"],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            close_fds=True,
            env=env,
        )
        os.close(slave)
        seen: list[tuple[float, bytes]] = []
        deadline = start + 300
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                seen.append((time.monotonic() - start, chunk))
            elif proc.poll() is not None:
                break
        proc.wait(timeout=60)
        os.close(master)
    return TerminalNight(returncode=proc.returncode, seen=seen, db=db)


def test_cli_capacities_are_the_marts_at_the_fleet_threshold(night: TerminalNight) -> None:
    assert night.returncode == 0, night.text[-3000:]
    lines = night.text.splitlines()
    printed = {(m[2], m[3]): (float(m[1]), m[4]) for m in map(CAPACITY_LINE.match, lines) if m}
    fleet_printed = {m[2]: (float(m[1]), int(m[3])) for m in map(FLEET_LINE.match, lines) if m}

    marts = q(
        night.db,
        "select deployment, workload, threshold_tok_s, capacity_streams, is_lower_bound, "
        "first_failing_level from marts.fct_capacity",
    )
    fleet_marts = q(
        night.db, "select workload, threshold_tok_s, capacity_streams from marts.fct_fleet_capacity"
    )
    rates = dict(
        q(
            night.db,
            "select concurrency, median(median_decode_tok_s) from marts.fct_levels group by 1",
        )
    )
    # the sweep really puts a level between 15 and 20 tok/s (else this test could not fail)
    within("median decode tok/s at 4 streams", rates[4], low=20, context=rates)
    within("median decode tok/s at 6 streams", rates[6], 15, 20, rates)
    within("median decode tok/s at 8 streams", rates[8], high=15, context=rates)

    assert len(printed) == len(marts) == 2
    for dep, wl, threshold, cap, lower_bound, first_failing in marts:
        assert float(threshold) == 15
        assert cap == 6 and not lower_bound and first_failing == 8
        shown_threshold, text = printed[(dep, wl)]
        assert shown_threshold == 15
        assert text == f"{cap} streams (fails at {first_failing})"
    assert {wl: (float(t), c) for wl, t, c in fleet_marts} == fleet_printed
    assert fleet_printed == {"code": (15.0, 6), "prose": (15.0, 6)}


def test_first_line_at_once_and_progress_while_the_sweep_runs(night: TerminalNight) -> None:
    t_first = night.first(rb"run id: \S+ \xc2\xb7 fleet t15")
    t_progress = night.first(rb"m/code c=\d+ trial \d: \d+/\d+ ok, wave median")
    t_table = night.first(rb"med tok/s")
    assert t_first < 20, t_first  # at once (imports included, on a loaded 2-core machine)
    assert t_first < t_progress < t_table  # live progress before the results are printed
