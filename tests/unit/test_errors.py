"""One base for every error sparkcap words for a person: the CLI catches it once, so a new
error class cannot be forgotten in a list there, and every class is defined in sparkcap.errors
beside its siblings, keeping the built-in base code may catch it by."""

from __future__ import annotations

import importlib
import importlib.resources
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic_settings import SettingsError

from sparkcap import cli
from sparkcap.config.command_line import parse_extra_body, parse_header_options, search_plan
from sparkcap.errors import MissingFile, OptionError, SparkcapError
from tests.support.cli import sweep_args

WORDED = {
    "sparkcap.errors:BuildError": RuntimeError,
    "sparkcap.errors:CLIError": Exception,
    "sparkcap.errors:MissingSecret": LookupError,
    "sparkcap.errors:DistributedError": RuntimeError,
    "sparkcap.errors:OfflineError": RuntimeError,
    "sparkcap.errors:FleetError": ValueError,
    "sparkcap.errors:LakeError": RuntimeError,
    "sparkcap.errors:ClientProcessError": RuntimeError,
    "sparkcap.errors:LocalServerError": RuntimeError,
    "sparkcap.errors:DataQualityFailed": RuntimeError,
    "sparkcap.errors:ManagedProcessError": RuntimeError,
    "sparkcap.errors:ReportError": RuntimeError,
    "sparkcap.errors:PreflightError": RuntimeError,
    "sparkcap.errors:JudgeError": RuntimeError,
    "sparkcap.errors:StorageError": RuntimeError,
    "sparkcap.errors:WarehouseBusy": RuntimeError,
    "sparkcap.errors:NotFound": LookupError,
    "sparkcap.errors:MissingFile": FileNotFoundError,
    "sparkcap.errors:OptionError": ValueError,
    "sparkcap.errors:QueryFailed": RuntimeError,
    "sparkcap.errors:StaleSchedule": RuntimeError,
    "sparkcap.errors:BadEnvironment": SettingsError,
}


@pytest.mark.parametrize(("where", "builtin"), sorted(WORDED.items()))
def test_every_worded_error_is_a_sparkcap_error_and_keeps_its_builtin_base(
    where: str, builtin: type[Exception]
) -> None:
    module, name = where.split(":")
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, SparkcapError) and issubclass(cls, builtin)


def test_the_cli_words_any_sparkcap_error_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sparkcap.errors import LakeError
    from sparkcap.store import connection

    def boom(*args: object, **kwargs: object) -> None:
        raise LakeError("lake memory://x: manifest of wave w1 does not match its part")

    monkeypatch.setattr(connection, "open_warehouse", boom)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["sql", "select 1", "--db", "x.duckdb"])
    assert exit_.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: lake memory://x: manifest of wave w1 does not match its part"
    ]


def test_a_malformed_environment_is_one_line_before_the_command_starts(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """pydantic-settings' own error (a variable that is not JSON) is worded like any other,
    and said first: the environment is checked once, before any option of the command."""
    monkeypatch.setenv("SPARKCAP_DBT_VARS", "{not json")
    args = ["--endpoint", "http://127.0.0.1:9/v1", "--model", "m", "--workload", "code"]
    with pytest.raises(SystemExit) as exit_:
        cli.main(["sweep", *args, "--max-level", "8", "--db", "x.duckdb"])
    assert exit_.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        'error: error parsing value for field "dbt_vars" from source "EnvSettingsSource"'
    ]


@pytest.mark.parametrize(
    ("parse", "line"),
    [
        (lambda: parse_extra_body("[1]"), "--extra-body must be a JSON object, got list"),
        (lambda: parse_extra_body("NaN"), "--extra-body is not JSON: NaN is not a JSON number"),
        (lambda: parse_header_options(["X-Key"]), "--header: expected NAME:VALUE, got 'X-Key'…"),
        (lambda: search_plan(False, max_level=8), "--max-level applies only with --search"),
    ],
)
def test_an_option_that_cannot_be_taken_is_a_sparkcap_error_where_it_is_parsed(
    parse: Callable[[], object], line: str
) -> None:
    """The command line passes the parsers' errors through as they are: no wrapper to forget."""
    with pytest.raises(OptionError) as exc:
        parse()
    assert isinstance(exc.value, SparkcapError) and isinstance(exc.value, ValueError)
    assert str(exc.value).startswith(line)


def test_a_part_missing_from_the_install_is_a_missing_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """resources sits below every stage: it raises the person-facing class itself."""
    from sparkcap import resources

    monkeypatch.setattr(importlib.resources, "files", lambda _: tmp_path / "sparkcap")
    with pytest.raises(MissingFile, match="sparkcap's dbt/ folder is missing"):
        resources.dbt_project_dir()


def test_a_missing_ca_bundle_is_a_missing_file(tmp_path: Path) -> None:
    from sparkcap.config.deployment import Deployment
    from sparkcap.loadgen.connections import tls_verify

    dep = Deployment(
        name="m", endpoint="http://127.0.0.1:9/v1", model="m", ca_bundle=tmp_path / "ca.pem"
    )
    with pytest.raises(MissingFile, match="CA bundle not found"):
        tls_verify(dep)


SWEEP = sweep_args("http://127.0.0.1:9/v1")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["sql", "select 1"], "error: no warehouse at {db} (run a sweep first)"),
        (["validate"], "error: no runs in {db}"),
        ([*SWEEP, "--run", "latest"], "error: no runs in {db} to add to (leave out --run)"),
        ([*SWEEP, "--run", "r9"], "error: no run r9 in {db}"),
    ],
)
def test_what_a_person_named_and_is_not_there_is_one_line_through_the_one_catch(
    args: list[str],
    line: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """cli.main catches SparkcapError only: a missing warehouse or run must be raised as
    errors.MissingFile / NotFound where it is found, or it would escape as a traceback."""
    from sparkcap.store.connection import open_warehouse

    db = tmp_path / "w.duckdb"
    if args[0] != "sql":  # an empty warehouse: its schema and no runs
        with open_warehouse(db):
            pass
    with pytest.raises(SystemExit) as exit_:
        cli.main([*args, "--db", str(db)])
    assert exit_.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == [line.format(db=db)]
