"""Text from users, files and servers is printed and published as text, a sweep that measured
nothing says so, and a Ctrl-C leaves one error line and a run row that says what happened.

- Rich markup: ``--model '[/oops]'``, a server's model id ``[bold]x`` and ``[rank0]`` /
  ``[/v1/…]`` in ``sparkcap sql`` cells reach the terminal literally (item 4).
- Every request refused: the CLI prints the mart's verdict ("no valid measurement at level 1:
  2 of 2 rejected (429)"), never "below 20 tok/s", and exits non-zero; the report, the Prefect
  artifact and compare show the same verdict (item 5).
- A model named ``<!--<script>…</script>&`` leaves the report's inlined chart JSON free of
  anything an HTML parser reads inside ``<script>`` (item 11).
- Ctrl-C during a sweep or a night: ``error: interrupted (Ctrl-C): …``, exit 130, the run row
  ``incomplete`` with the reason, the finished waves kept (item 12).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from sparkcap.servers.sim.server import SimServer
from tests.support.cli import cli_in_process, sweep_args
from tests.support.fleets import one_deployment_fleet
from tests.support.queries import q
from tests.support.sims import fast_profile, faulty

pytestmark = [pytest.mark.reliability, pytest.mark.integration]

HOSTILE_MODEL = "<!--<script>m</script>&x"
REFUSED = "no valid measurement at level 1: 2 of 2 rejected (429)"


# --- item 4: markup ---------------------------------------------------------------------------


def _sweep_asking(tmp_path: Path, served: str, asked: str) -> tuple[str, int, str]:
    """A sweep asking a simulator that serves model ``served`` for model ``asked``: (the
    simulator's endpoint, the command's exit status, its stderr)."""
    with SimServer([fast_profile(served)]) as sim:
        p = cli_in_process(*sweep_args(sim.endpoint, asked), "--db", str(tmp_path / "w.duckdb"))
    return sim.endpoint, p.returncode, p.stderr


def _refused_with_both_names_as_given(tmp_path: Path, served: str, asked: str) -> None:
    """The sweep ends with exit 1 and one error line naming both models letter for letter."""
    endpoint, code, err = _sweep_asking(tmp_path, served, asked)
    assert code == 1
    assert err.splitlines() == [
        f"error: unknown model '{asked}' at {endpoint} (server offers: {served})"
    ], err


def test_a_model_name_that_looks_like_markup_is_printed_as_text(tmp_path: Path) -> None:
    _refused_with_both_names_as_given(tmp_path, served="m", asked="[/oops]")


def test_a_servers_model_id_is_printed_literally(tmp_path: Path) -> None:
    _refused_with_both_names_as_given(tmp_path, served="[bold]x", asked="m")


def test_escape_sequences_from_a_server_or_a_cell_never_reach_the_terminal(
    tmp_path: Path,
) -> None:
    """Markup off is not enough: ESC sequences in a model id or a stored error would clear,
    retitle or recolour the terminal. They are spelled out (``\\x1b``) wherever text prints."""
    _, code, err = _sweep_asking(tmp_path, served="x\x1b[2Jy", asked="m")
    assert code == 1 and "\x1b" not in err
    assert "(server offers: x\\x1b[2Jy)" in err, err
    from sparkcap.store.connection import ensure_schema, open_warehouse

    with open_warehouse(tmp_path / "w.duckdb") as con:
        ensure_schema(con)
    p = cli_in_process(
        "sql", "select chr(27) || ']0;pwned' || chr(7) as e", "--db", str(tmp_path / "w.duckdb")
    )
    code, out, err = p.returncode, p.stdout, p.stderr
    assert code == 0 and "\x1b" not in out and "\\x1b]0;pwned\\x07" in out, out


def test_sql_table_cells_keep_their_brackets(tmp_path: Path) -> None:
    from sparkcap.store.connection import ensure_schema, open_warehouse

    db = tmp_path / "w.duckdb"
    with open_warehouse(db) as con:
        ensure_schema(con)
    p = cli_in_process(
        "sql",
        "select '[rank0]: CUDA error: out of memory' as error, '[/v1/chat/completions]' as path",
        "--db",
        str(db),
    )
    code, out, err = p.returncode, p.stdout, p.stderr
    assert (code, err) == (0, "")
    assert "[rank0]: CUDA error: out of memory" in out
    assert "[/v1/chat/completions]" in out


# --- items 5 and 11: one run of a refusing server and a hostile model name ---------------------


@pytest.fixture(scope="module")
def refused_night(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """One run, built once: ``hostile`` (model ``<!--<script>…``) swept through the library,
    then ``r429`` (every request refused with 429) added by the CLI, which builds the run and
    prints what the marts say; the smallest plans (one level, 8-token outputs)."""
    from sparkcap.config.deployment import Deployment
    from sparkcap.config.plan import SweepPlan, SweepRequest
    from sparkcap.night.sweeps import run_sweeps

    base = tmp_path_factory.mktemp("refused")
    mp = pytest.MonkeyPatch()
    mp.setenv("SPARKCAP_HOME", str(base / "home"))
    db = base / "w.duckdb"
    try:
        with SimServer([faulty("r429", reject_status=429), fast_profile(HOSTILE_MODEL)]) as sim:
            hostile = SweepRequest(
                deployment=Deployment(name="hostile", endpoint=sim.endpoint, model=HOSTILE_MODEL),
                workload="code",
                plan=SweepPlan(
                    levels=(1,), trials=1, warmup=False, max_tokens=8, client_processes=1
                ),
            )
            first = asyncio.run(run_sweeps([hostile], db))
            p = cli_in_process(
                *sweep_args(sim.endpoint, "r429"),
                "--levels", "1", "--trials", "2", "--max-tokens", "8", "--client-processes", "1",
                "--run", first.run_id, "--db", str(db),
            )  # fmt: skip
            code, out, err = p.returncode, p.stdout, p.stderr
        yield {"db": db, "run_id": first.run_id, "code": code, "out": out, "err": err}
    finally:
        mp.undo()


def test_a_sweep_every_request_of_which_was_refused_says_so_and_fails(
    refused_night: dict[str, object],
) -> None:
    db, run_id = Path(str(refused_night["db"])), str(refused_night["run_id"])
    out, err = str(refused_night["out"]), str(refused_night["err"])
    assert refused_night["code"] == 1, err
    assert f"capacity at 20 tok/s — r429/code: {REFUSED}" in out.splitlines(), out
    assert "below" not in out
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors == [f"error: run {run_id}: r429/code measured nothing: {REFUSED}"], err
    (row,) = q(
        db,
        "select capacity_streams, is_measured, is_below_lowest_level, unmeasured_level, "
        "capacity_verdict from marts.fct_capacity where deployment = 'r429'",
    )
    assert row == (0, False, False, 1, REFUSED)


def test_every_reader_of_a_capacity_shows_the_marts_verdict(
    refused_night: dict[str, object], tmp_path: Path
) -> None:
    from sparkcap.night.plan import night_gaps
    from sparkcap.night.steps import capacity_markdown
    from sparkcap.publish.compare import compare
    from sparkcap.publish.night import read_night
    from sparkcap.publish.report import render_report

    db, run_id = Path(str(refused_night["db"])), str(refused_night["run_id"])
    markdown = capacity_markdown(read_night(db, run_id))
    assert "| r429 | code | 0 |" in markdown and f"| {REFUSED} |" in markdown, markdown
    assert f"r429/code: {REFUSED}" in night_gaps(db, run_id)  # a night with it exits 1
    capacity = compare(db, run_id, run_id)["capacity"].set_index("deployment")
    assert capacity.loc["r429", "b_verdict"] == REFUSED
    assert pd.isna(capacity.loc["r429", "capacity_change"])  # nothing measured: no change
    report = render_report(db, run_id, tmp_path / "r", update_latest=False, export_images=False)
    page = report.index.read_text(encoding="utf-8")
    assert f"<td>{REFUSED}</td>" in page
    assert "<td>no valid measurement</td>" in page  # the bracket: nothing to bracket


def test_a_model_named_like_a_script_leaves_the_charts_json_inert(
    refused_night: dict[str, object], tmp_path: Path
) -> None:
    from sparkcap.publish.report import render_report

    db, run_id = Path(str(refused_night["db"])), str(refused_night["run_id"])
    report = render_report(db, run_id, tmp_path / "r", update_latest=False, export_images=False)
    page = report.index.read_text(encoding="utf-8")
    found = re.search(r"const charts = (.*);\nfor \(const", page, re.S)
    assert found, page[-2000:]
    inlined = found.group(1)
    for raw in ("<", ">", "&", "\u2028", "\u2029"):
        assert raw not in inlined, raw
    specs = json.loads(inlined)  # JSON, and so the same spec the page embeds
    assert HOSTILE_MODEL in json.dumps(specs, ensure_ascii=False)  # the name survived
    assert set(specs) >= {"chart-headline", "chart-rates"}
    # the page has exactly the scripts it was built with: the Vega bundle and the charts
    assert page.count("</script>") == 2


def test_inlined_json_parses_back_to_the_same_spec() -> None:
    from sparkcap.publish.report.render import inline_json

    spec = {
        "data": {"values": [{"model": "<!--<script>", "reason": "</script> & <b> \u2028\u2029"}]},
        "title": "a > b",
    }
    text = inline_json(spec)
    assert json.loads(text) == spec
    assert not set(text) & set("<>&\u2028\u2029"), text


# --- item 12: Ctrl-C ----------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["sweep", "run"])
def test_ctrl_c_gives_one_error_line_exit_130_and_an_interrupted_run(
    command: str, tmp_path: Path
) -> None:
    db = tmp_path / "w.duckdb"
    with SimServer([fast_profile("m")]) as sim:
        if command == "sweep":
            args = [
                *sweep_args(sim.endpoint),
                "--levels", "1,2", "--trials", "3", "--max-tokens", "60",
                "--client-processes", "1", "--db", str(db),
            ]  # fmt: skip
        else:
            fleet = one_deployment_fleet(
                tmp_path, "ctrlc", sim.endpoint, levels=[1, 2], trials=3, max_tokens=60
            )
            args = ["run", "--fleet", str(fleet), "--no-prefect", "--db", str(db)]
            args += ["--reports", str(tmp_path / "r")]
        proc = subprocess.Popen(
            [sys.executable, "-m", "sparkcap.cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(os.environ),
        )
        assert proc.stderr is not None
        seen = b""
        deadline = time.monotonic() + 90
        try:
            # the first finished wave's progress line: something is measured, more is to come
            while b"waves] m/code" not in seen and time.monotonic() < deadline:
                ready, _, _ = select.select([proc.stderr], [], [], 0.5)
                if ready:
                    chunk = os.read(proc.stderr.fileno(), 65536)
                    if not chunk:
                        break
                    seen += chunk
            assert b"waves] m/code" in seen, seen.decode(errors="replace")
            proc.send_signal(signal.SIGINT)
            _, rest = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    err = (seen + rest).decode()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    (run_id, status, reason) = q(db, "select run_id, status, status_reason from raw.runs")[0]
    (n_waves,) = q(db, "select count(*) from raw.waves")[0]
    assert errors[0] == (
        f"error: interrupted (Ctrl-C): run {run_id} is marked incomplete; its {n_waves} staged "
        "wave(s) are kept (`sparkcap build` builds them)"
    )
    assert status == "incomplete"
    assert str(reason).startswith("interrupted (Ctrl-C): "), reason
    assert 1 <= int(str(n_waves)) < 8  # the finished waves, not the planned ones
