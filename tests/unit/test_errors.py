"""One base for every error sparkcap words for a person: the CLI catches it once, so a new
error class cannot be forgotten in a list there (DistributedError, LakeError and the managed
process errors once escaped as tracebacks that way)."""

from __future__ import annotations

import importlib

import pytest

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
    from sparkcap import cli
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
