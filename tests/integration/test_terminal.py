"""What a person sees in a terminal: tables that fit 80 columns, link checks worded as dbt
judges them. Elsewhere, on nights they share: the first line at once and live progress while a
night runs (``test_threshold.py``); hand-made sweeps read as one report
(``test_combined_report.py``)."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

from tests.support.cli import cli_in_process
from tests.support.fleets import write_fleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_levels_table_and_capacities_fit_80_columns(twin_night: dict[str, object]) -> None:
    from rich.console import Console

    from sparkcap import cli
    from sparkcap.publish import terminal
    from sparkcap.publish.night import read_night

    buf = io.StringIO()
    old = cli.out
    cli.out = Console(file=buf, width=80)
    try:
        night = read_night(Path(str(twin_night["db"])), str(twin_night["run_id"]))
        terminal.print_levels(cli.out, sys.stdout, night)
        terminal.print_fleet(cli.out, night)
    finally:
        cli.out = old
    lines = buf.getvalue().splitlines()
    assert len(lines) > 30
    assert max(len(line) for line in lines) <= 80
    assert "…" not in buf.getvalue()  # no header or value cut short
    header = next(line for line in lines if "deployment" in line)
    for name in ("workload", "streams", "valid", "med tok/s", "min tok/s", "TTFT s", "failed"):
        assert name in header
    # the fleet's answer for independent arrivals follows the burst figures (fct_plan_rates)
    words = " ".join(buf.getvalue().split())
    assert "fleet under independent arrivals — 70% code / 30% prose:" in words, words
    assert "requests a minute" in words and "users at a 30 s think time" in words


def test_machine_readable_levels(twin_night: dict[str, object]) -> None:
    import csv
    import json

    from sparkcap import cli
    from sparkcap.publish import terminal
    from sparkcap.publish.night import read_night

    db, run_id = Path(str(twin_night["db"])), str(twin_night["run_id"])
    real = sys.stdout
    try:
        sys.stdout = io.StringIO()
        terminal.print_levels(cli.out, sys.stdout, read_night(db, run_id), "json")
        doc = json.loads(sys.stdout.getvalue())
        sys.stdout = io.StringIO()
        terminal.print_levels(cli.out, sys.stdout, read_night(db, run_id), "csv")
        rows = list(csv.DictReader(io.StringIO(sys.stdout.getvalue())))
    finally:
        sys.stdout = real
    assert doc["run_id"] == run_id and len(doc["levels"]) == len(rows) == 30
    caps = {(c["deployment"], c["workload"]): c["capacity_streams"] for c in doc["capacity"]}
    assert caps[("glm", "code")] == 4
    assert {r["capacity_streams"] for r in rows if r["deployment"] == "glm"} == {"4", "1"}


def test_link_check_prints_dbts_verdict_for_each_link(tmp_path: Path) -> None:
    """`sparkcap link-check` words each link as the marts judge it (int_link_health): a link
    at its nominal rate is ok, one below the fleet's share is UNHEALTHY, one whose probe
    measured nothing FAILED with the probe's error; any but ok exits 1."""

    links = [
        {"name": "fast", "nominal_gbps": 12.5, "command": "echo gbps=12.5", "format": "plain"},
        {"name": "slow", "nominal_gbps": 100, "command": "echo gbps=40", "format": "plain"},
        {"name": "gone", "nominal_gbps": 100, "command": "echo nothing", "format": "plain"},
    ]
    fleet = tmp_path / "links.yaml"
    write_fleet(
        fleet,
        {
            "name": "links",
            "workloads": {"code": {"levels": [1]}},
            "link_min_share": 0.8,
            "deployments": [
                {"name": "ring", "model": "m", "endpoint": "http://127.0.0.1:9/v1"}
                | {"links": links}
            ],
        },
    )
    env = {**os.environ, "SPARKCAP_HOME": str(tmp_path / "home")}
    p = cli_in_process(
        "link-check", "--fleet", str(fleet), "--db", str(tmp_path / "l.duckdb"), env=env
    )
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    assert p.stdout.splitlines()[1:] == [
        "ring/fast: 12.50 Gb/s of 12.5 nominal — ok",
        "ring/gone: — of 100 nominal — FAILED (no 'gbps=<number>' line)",
        "ring/slow: 40.00 Gb/s of 100 nominal — UNHEALTHY",
    ]
