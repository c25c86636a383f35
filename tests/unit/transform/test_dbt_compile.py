"""A rule compiled outside a build (the live judge's, the regression gate's) runs dbt as a
build does: under dbt's own command line, so the process's arguments (a `--header` secret)
never reach dbt's log, which logs the command line it runs under."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sparkcap.settings import get_settings
from sparkcap.transform.dbt_compile import compile_inline


def test_a_compile_logs_dbts_command_line_never_the_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "hdr-unit-3f9a1c"
    monkeypatch.setenv("SPARKCAP_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SPARKCAP_CACHE", str(tmp_path / "cache"))  # nothing kept: dbt runs
    monkeypatch.setattr(sys, "argv", ["sparkcap", "sweep", "--header", f"x-api-key: {secret}"])
    compiled = compile_inline("select 1 as one -- a compile of its own")
    assert compiled.strip().startswith("select 1 as one")
    assert get_settings().work_dir == tmp_path / "home"
    assert sys.argv[-1] == f"x-api-key: {secret}"  # the process's own command line is back
    logs = [p for p in (tmp_path / "home").rglob("*") if p.is_file()]
    assert any(p.name == "dbt.log" for p in logs), logs  # dbt did log, at debug
    for path in logs:
        assert secret.encode() not in path.read_bytes(), path


def test_a_compiled_rule_is_kept_for_the_next_process_and_its_vars_still_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sparkcap.errors import BuildError
    from sparkcap.transform import dbt_compile

    monkeypatch.setenv("SPARKCAP_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SPARKCAP_CACHE", str(tmp_path / "cache"))
    inline = "select {{ var('threshold_tok_s') }} as threshold_tok_s -- kept"
    first = compile_inline(inline, {"threshold_tok_s": 21.5})
    assert "21.5" in first
    (kept,) = (tmp_path / "cache" / "dbt-compiled").glob("*.sql")
    assert kept.read_text(encoding="utf-8") == first
    # another process: nothing in memory, and no dbt to run
    monkeypatch.setattr(dbt_compile, "_COMPILED", {})
    monkeypatch.setattr("dbt.cli.main.dbtRunner", None)
    assert compile_inline(inline, {"threshold_tok_s": 21.5}) == first
    with pytest.raises(BuildError, match="threshold_tok_s"):
        compile_inline(inline, {"threshold_tok_s": -1})
