"""One base for every error sparkcap words for a person: the CLI catches it once, so a new
error class cannot be forgotten in a list there (DistributedError, LakeError and the managed
process errors once escaped as tracebacks that way)."""

from __future__ import annotations

import importlib
from collections.abc import Callable

import pytest

from sparkcap import cli
from sparkcap.config import OptionError, parse_extra_body, parse_header_options, search_plan
from sparkcap.errors import SparkcapError

WORDED = {
    "sparkcap.transform.dbt_build:BuildError": RuntimeError,
    "sparkcap.cli:CLIError": Exception,
    "sparkcap.config:MissingSecret": LookupError,
    "sparkcap.night.distributed:DistributedError": RuntimeError,
    "sparkcap.dq.offline:OfflineError": RuntimeError,
    "sparkcap.config.fleet:FleetError": ValueError,
    "sparkcap.store.lake:LakeError": RuntimeError,
    "sparkcap.loadgen.procs:ClientProcessError": RuntimeError,
    "sparkcap.servers.llama:LocalServerError": RuntimeError,
    "sparkcap.night.steps:DataQualityFailed": RuntimeError,
    "sparkcap.servers.processes:ManagedProcessError": RuntimeError,
    "sparkcap.publish.report.data:ReportError": RuntimeError,
    "sparkcap.night.sweeps:PreflightError": RuntimeError,
    "sparkcap.transform.live_judge:JudgeError": RuntimeError,
    "sparkcap.store.warehouse:StorageError": RuntimeError,
    "sparkcap.store.warehouse:WarehouseBusy": RuntimeError,
    "sparkcap.errors:NotFound": LookupError,
    "sparkcap.errors:MissingFile": FileNotFoundError,
    "sparkcap.config:OptionError": ValueError,
    "sparkcap.publish.marts:QueryFailed": RuntimeError,
    "sparkcap.night.schedule:StaleSchedule": RuntimeError,
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
    from sparkcap.store import warehouse
    from sparkcap.store.lake import LakeError

    def boom(*args: object, **kwargs: object) -> None:
        raise LakeError("lake memory://x: manifest of wave w1 does not match its part")

    monkeypatch.setattr(warehouse, "open_warehouse", boom)
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
