"""A built wheel, installed (not editable) into a fresh venv, runs the whole night on its own.

The parts sparkcap runs (dbt project, expectation suites, the nightly flow, the twin fleet) are
package data; this proves no command finds them through the source tree: the venv lives outside
the repository, the commands run from an empty folder, and the installed package is unchanged
afterwards (dbt's target and logs, GX and Prefect state all land in the working area).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.paths import ROOT
from tests.support.fleets import write_fleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _files(folder: Path) -> set[str]:
    return {
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv outside the checkout with the wheel built from it, installed without its
    dependencies: those come from this project's venv through a ``.pth`` line, a plain path
    (a path in a ``.pth`` is not a site dir, so the checkout's editable-install hook in it
    never runs). Installing ~150 dependencies again proved nothing ``make venv`` had not just
    proved from the same pins, for ~2 min of a 15 min suite; ``pip check`` still proves the
    wheel's own metadata asks for what is there."""
    base = tmp_path_factory.mktemp("wheel")
    # build from a copy: a build writes egg-info and build/ into its source folder, and an
    # egg-info on sys.path would make pip think sparkcap is already installed
    src = base / "src"
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            ".sparkcap",
            "build",
            "*.egg-info",
            "warehouse",
            "reports",
            "__pycache__",
            ".mypy_cache",
            ".ruff_cache",
            "target",
            "logs",
        ),
    )
    clean = _env(base)
    dist = base / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(src)],
        check=True,
        capture_output=True,
        text=True,
        cwd=base,
        env=clean,
        timeout=600,
    )
    # a folder left out of pyproject's package list costs a newcomer a page of warnings each
    assert "would be ignored" not in built.stdout + built.stderr, built.stderr[-2000:]
    wheel = next(dist.glob("sparkcap-*.whl"))
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300, env=clean)
    python = str(venv / "bin" / "python")
    own_site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        env=clean,
    ).stdout.strip()
    (Path(own_site) / "sparkcap_test_dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8"
    )
    done = subprocess.run(
        [python, "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        text=True,
        env=clean,
        timeout=600,
    )
    assert "Successfully installed" in done.stdout and "sparkcap-" in done.stdout, done.stdout
    checked = subprocess.run(
        [python, "-m", "pip", "check"], capture_output=True, text=True, env=clean, timeout=300
    )
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]
    return venv


def _env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARKCAP_", "PREFECT_"))}
    env.pop("PYTHONPATH", None)
    # the suite's own count of builds and validations: the wheel's night is one of them
    # (a log path, no part of sparkcap's, so nothing is found through the checkout by it)
    if "SPARKCAP_BUILD_LOG" in os.environ:
        env["SPARKCAP_BUILD_LOG"] = os.environ["SPARKCAP_BUILD_LOG"]
    env.update(
        SPARKCAP_HOME=str(work / ".sparkcap"),
        SPARKCAP_DB=str(work / "warehouse" / "night.duckdb"),
        SPARKCAP_REPORTS=str(work / "reports"),
        DO_NOT_TRACK="1",
    )
    return env


@dataclass(frozen=True)
class WheelNight:
    folder: Path  # the empty folder the commands ran in
    package: Path  # where the installed sparkcap lives
    before: set[str]  # the installed package's files before the night
    demo: subprocess.CompletedProcess[str]  # `sparkcap demo --fleet one.yaml`
    cli: Callable[..., subprocess.CompletedProcess[str]]

    @property
    def prefect_db(self) -> Path:
        return next((self.folder / ".sparkcap" / "prefect").rglob("*.db"))


@pytest.fixture(scope="module")
def wheel_night(installed: Path, tmp_path_factory: pytest.TempPathFactory) -> WheelNight:
    """`sparkcap demo` from the installed wheel in an empty folder: the Prefect flow on a
    one-deployment fleet the night launches itself, run once for the module and read by its
    tests (a whole-night test of its own on the twin fleet would cost a Prefect night)."""
    tmp_path = tmp_path_factory.mktemp("wheel-night")
    python = installed / "bin" / "python"
    sparkcap = installed / "bin" / "sparkcap"
    where = subprocess.run(
        [str(python), "-c", "import sparkcap; print(sparkcap.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(tmp_path),
        check=True,
    ).stdout.strip()
    package = Path(where).parent
    before = _files(package)

    fleet = tmp_path / "one.yaml"
    write_fleet(
        fleet,
        {
            "name": "wheel",
            "workloads": {"code": {"levels": [1, 2], "trials": 1, "max_tokens": 24}},
            "deployments": [
                {
                    "name": "glm",
                    "model": "glm",
                    "launch": {"kind": "sim"},
                    "extra_body": {"ignore_eos": True},
                }
            ],
        },
    )

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(sparkcap), *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=_env(tmp_path),
            timeout=900,
        )

    # `demo` is the Prefect flow (loaded from package data) on a fleet: its steps validate
    # with the expectation suites and build with the dbt project, both found in package data.
    # (`sparkcap build` and `validate` by hand call the same two functions, which find the
    # same package data: a second build and validation here proved no path the demo had not,
    # for ~25 s of CPU; `run --no-prefect`, the same steps without Prefect, is
    # tests/integration's.)
    demo = cli("demo", "--fleet", str(fleet))
    return WheelNight(folder=tmp_path, package=package, before=before, demo=demo, cli=cli)


def test_the_installed_wheel_runs_a_night_from_an_empty_folder(
    installed: Path, wheel_night: WheelNight
) -> None:
    package, before, demo, cli = (
        wheel_night.package,
        wheel_night.before,
        wheel_night.demo,
        wheel_night.cli,
    )
    assert package.is_relative_to(installed), package  # not the checkout
    assert "_project/dbt/dbt_project.yml" in before
    assert "_project/flows/nightly.py" in before
    assert "_project/fleets/twin.yaml" in before

    version = cli("--version")
    assert version.returncode == 0 and version.stdout.strip().startswith("sparkcap 0."), version

    assert demo.returncode == 0, demo.stderr[-3000:]
    assert "report:" in demo.stdout and "data docs:" in demo.stdout, demo.stdout[-3000:]
    # a Prefect night shows its progress on the terminal while it runs (not four silent
    # minutes), keeps Prefect's INFO chatter off it, and keeps the same progress at INFO in
    # the flow run's logs, in Prefect's own database (read here, not a night of its own)
    progress = r"\d\d:\d\d:\d\d \[\d+/\d+ waves\] glm/code c=2 trial 1"
    assert re.search(progress, demo.stderr), demo.stderr[-3000:]
    assert "| INFO" not in demo.stderr
    with sqlite3.connect(wheel_night.prefect_db) as con:
        logged = con.execute(
            "select level, message from log where message like '%c=2 trial 1%'"
        ).fetchall()
    assert logged and all(level == 20 for level, _ in logged)  # INFO
    rows = cli("sql", "select count(*) from marts.fct_capacity", "--format", "csv")
    assert rows.returncode == 0 and rows.stdout.strip().splitlines()[-1] == "1", rows

    assert _files(package) == before  # nothing was written into the installed package
    tmp_path = wheel_night.folder
    assert not (tmp_path / "dbt").exists() and not (tmp_path / "target").exists()


def test_the_prefect_night_completes_and_publishes_capacity_report_and_changes(
    wheel_night: WheelNight,
) -> None:
    """What the flow leaves in Prefect for a night that went well: the flow run Completed,
    and its artifacts: the capacity table, a link to the report, the change list beside it
    (a first night has no baseline, and says so). Read from Prefect's own database."""
    assert wheel_night.demo.returncode == 0, wheel_night.demo.stderr[-3000:]
    with sqlite3.connect(wheel_night.prefect_db) as con:
        flows = con.execute(
            "select f.name, r.id, r.state_type from flow_run r join flow f on f.id = r.flow_id"
        ).fetchall()
        ((_, run_id, state),) = [r for r in flows if r[0] == "nightly-fleet-sweep"]
        arts = {
            key: json.loads(data)
            for key, data in con.execute(
                "select key, data from artifact where flow_run_id = ?", [run_id]
            ).fetchall()
        }
    assert state == "COMPLETED", flows
    assert "capacity" in arts and "| deployment | workload |" in arts["capacity"], arts.keys()
    assert "file://" in arts.get("report", "") and "index.html" in arts["report"]
    report = re.search(r"file://(\S+?index\.html)", arts["report"])
    assert report is not None and Path(report[1]).exists(), arts["report"]
    assert "No baseline to compare with yet." in arts.get("changes", ""), arts.keys()
