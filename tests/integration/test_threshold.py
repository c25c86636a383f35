"""Every capacity the CLI prints is the mart's, at the fleet file's own threshold.

The deployment is built so that the answer depends on the threshold: its median rates at the
tested levels are about 50, 23, 16 and 12.5 tok/s, so at 15 tok/s it sustains 6 streams and at
the default 20 only 4. A CLI that applied its own rule, or the default threshold, would print
another number than ``marts.fct_capacity``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import duckdb
import pytest
import yaml

from sparkcap.servers.sim.server import SimServer
from tests.integration.helpers import fast_profile, run_cli
from tests.spread import within

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CAPACITY_LINE = re.compile(r"^capacity at (\S+) tok/s — (\w+)/(\w+): (.*)$")
FLEET_LINE = re.compile(r"^fleet capacity at (\S+) tok/s — (\w+): (\d+) streams")


# the simulated rates sit near the threshold: with the parallel workers and a CPU burner
# beside it, a starved simulator missed its schedule (23 -> 17 tok/s; a bucket dip gone), so
# it runs with the timing tests, alone
@pytest.mark.client_timing
def test_cli_capacities_are_the_marts_at_the_fleet_threshold(tmp_path: Path) -> None:
    # one token per 20 ms step at one stream, each extra stream slows the step by 40 %
    profile = fast_profile("m", step_s1=0.02, batch_slowdown=0.4, draft_tokens=0)
    db = tmp_path / "t.duckdb"
    env = {
        **os.environ,
        "SPARKCAP_HOME": str(tmp_path / "home"),
        "SPARKCAP_DB": str(db),
        "SPARKCAP_REPORTS": str(tmp_path / "reports"),
    }
    with SimServer([profile]) as sim:
        fleet = tmp_path / "t15.yaml"
        fleet.write_text(
            yaml.safe_dump(
                {
                    "name": "t15",
                    "threshold_tok_s": 15,
                    "workloads": {
                        wl: {"levels": [1, 4, 6, 8], "trials": 1, "max_tokens": 40, "warmup": False}
                        for wl in ("code", "prose")
                    },
                    "deployments": [{"name": "m", "model": "m", "endpoint": sim.endpoint}],
                }
            )
        )
        night = run_cli("run", "--fleet", str(fleet), "--no-prefect", env=env)
    assert night.returncode == 0, night.stderr[-3000:]
    lines = night.stdout.splitlines()
    printed = {(m[2], m[3]): (float(m[1]), m[4]) for m in map(CAPACITY_LINE.match, lines) if m}
    fleet_printed = {m[2]: (float(m[1]), int(m[3])) for m in map(FLEET_LINE.match, lines) if m}

    with duckdb.connect(str(db), read_only=True) as con:
        marts = con.execute(
            "select deployment, workload, threshold_tok_s, capacity_streams, is_lower_bound, "
            "first_failing_level from marts.fct_capacity"
        ).fetchall()
        fleet_marts = con.execute(
            "select workload, threshold_tok_s, capacity_streams from marts.fct_fleet_capacity"
        ).fetchall()
        rates = dict(
            con.execute(
                "select concurrency, median(median_decode_tok_s) from marts.fct_levels group by 1"
            ).fetchall()
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
