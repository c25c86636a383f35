"""pyproject's explicit package list must cover the tree: a new subpackage left out would be
missing from every wheel while the editable checkout keeps working."""

from __future__ import annotations

import tomllib

from sparkcap import __version__, resources
from tests.paths import ROOT


def test_every_subpackage_and_part_is_shipped() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "sparkcap").rglob("__init__.py")
        if "_project" not in p.parts
    }
    assert on_disk <= listed, on_disk - listed
    mapped = config["package-dir"]
    assert {f"sparkcap._project.{name}" for name in resources.PARTS} == set(mapped)
    # a data folder left out of the list is a warning per folder at every build (setuptools
    # treats every folder as a package); dbt's own output folders are not parts
    not_parts = {"target", "logs", "dbt_packages", "__pycache__"}
    for package, folder in mapped.items():
        assert package in listed
        assert (ROOT / folder).is_dir()
        folders = {
            ".".join((package, *d.relative_to(ROOT / folder).parts))
            for d in (ROOT / folder).rglob("*")
            if d.is_dir() and not not_parts & set(d.relative_to(ROOT / folder).parts)
        }
        assert folders <= listed, folders - listed


def test_parts_resolve_in_a_checkout() -> None:
    assert (resources.dbt_project_dir() / "dbt_project.yml").is_file()
    assert (resources.expectations_dir() / "waves.json").is_file()
    assert resources.nightly_flow_file().is_file()
    assert resources.bundled_fleet("twin").is_file()


def test_reading_a_fleet_file_or_the_cli_needs_no_warehouse() -> None:
    """Validating config must not pull in DuckDB and Arrow (and `sparkcap --version` stays
    instant): the rooms import each other only where the work needs it."""
    import subprocess
    import sys

    code = (
        "import sys, sparkcap.config.fleet, sparkcap.cli; "
        "heavy = {'sparkcap.store.connection', 'duckdb', 'pyarrow', 'sparkcap.night.steps'}; "
        "heavy &= set(sys.modules); "
        "print(sorted(heavy))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_python_dash_m_sparkcap_is_the_command() -> None:
    """``python -m sparkcap`` where the ``sparkcap`` script is not on PATH."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "sparkcap", "--version"], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"sparkcap {__version__}\n", "")


def test_the_package_ships_its_type_information() -> None:
    """PEP 561: a ``py.typed`` marker in the package and in the wheel's package data, so that
    mypy checks code that imports sparkcap against its annotations."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "py.typed" in config["package-data"]["sparkcap"]
    assert (ROOT / "sparkcap" / "py.typed").is_file()


def test_the_command_line_module_stays_a_thin_layer() -> None:
    """cli.py parses, calls and prints; past 600 lines it had started to hold logic of its
    own (what a run prints from the marts now lives in publish/terminal.py)."""
    lines = (ROOT / "sparkcap" / "cli.py").read_text().count("\n")
    assert lines < 600, f"sparkcap/cli.py has {lines} lines: move what is not parsing out"
