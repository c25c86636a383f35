"""dbt's own macros compiled to SQL, for a decision taken outside a build.

A reader that must judge what no model covers (``sparkcap compare A B --fail-on regression``
judges any two runs; ``fct_capacity_regressions`` only each run against the one before it)
runs the macro the models run, never a copy of its SQL: ``dbt compile --inline`` against a
scratch warehouse (a macro over named relations reads nothing). The SQL is kept per process
and in the cache folder, keyed by what it depends on (the project's files, dbt's and Python's
versions: ``dbt_build._manifest_key``; the text; every var dbt sees), so every night that
compiles the capture's rules reads them without importing dbt once one process compiled them.
The parse behind a compile is the builds' (``dbt_build._parsed_manifest``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from sparkcap.errors import BuildError
from sparkcap.settings import get_settings
from sparkcap.transform.dbt_build import (
    _manifest_key,
    _parsed_manifest,
    _release_dbt_logs,
    _release_warehouse,
    check_vars,
    dbt_args,
    dbt_command_line,
    environment_vars,
)

_COMPILE_LOCK = threading.Lock()
_COMPILED: dict[str, str] = {}


def compile_inline(inline: str, dbt_vars: dict[str, Any] | None = None) -> str:
    """The SQL dbt compiles ``inline`` (Jinja calling the project's macros) to under these
    vars, cached by the text and every var dbt sees (SPARKCAP_DBT_VARS included);
    ``BuildError`` where dbt cannot (the project or its vars are broken)."""
    seen = {**environment_vars(), **(dbt_vars or {})}
    check_vars(seen)  # a var out of its range is refused whether or not the SQL is kept
    key = json.dumps([inline, seen], sort_keys=True)
    with _COMPILE_LOCK:
        if key in _COMPILED:
            return _COMPILED[key]
        kept = _kept_file(key)
        with contextlib.suppress(OSError, UnicodeDecodeError):
            _COMPILED[key] = kept.read_text(encoding="utf-8")
            return _COMPILED[key]
        from dbt.cli.main import dbtRunner

        with tempfile.TemporaryDirectory(prefix="sparkcap-compile-") as tmp:
            scratch = Path(tmp) / "compile.duckdb"
            # dbt's profile reads the warehouse path from the environment: point it at a
            # scratch file for the compile (nothing is read from it), then put the real one back
            saved = os.environ.get("SPARKCAP_DB")
            os.environ["SPARKCAP_DB"] = str(scratch)
            try:
                args = dbt_args(
                    "compile", scratch, ["--inline", inline, "--log-level", "none"], dbt_vars
                )
                with dbt_command_line(args):
                    manifest = _parsed_manifest(dbt_args("compile", scratch, None, dbt_vars))
                    res = dbtRunner(manifest=manifest).invoke(args)
            finally:
                if saved is None:
                    os.environ.pop("SPARKCAP_DB", None)
                else:
                    os.environ["SPARKCAP_DB"] = saved
                _release_warehouse()
                _release_dbt_logs()
        results = getattr(res.result, "results", None) or []
        if not res.success or not results:
            why = str(res.exception or "no compiled node").strip().splitlines()[0]
            raise BuildError(f"could not compile dbt's {inline.strip()}: {why}")
        _COMPILED[key] = str(results[0].node.compiled_code)
        _keep(kept, _COMPILED[key])
        return _COMPILED[key]


def _kept_file(key: str) -> Path:
    digest = hashlib.sha256(f"{_manifest_key([])}\0{key}".encode()).hexdigest()
    return get_settings().cache_dir / "dbt-compiled" / f"{digest}.sql"


def _keep(path: Path, sql: str) -> None:
    """Kept for the next process; a full disk or a read-only cache costs that process a
    compile. Written under a temporary name and renamed, so a reader never sees half a file."""
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(sql, encoding="utf-8")
        partial.replace(path)
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink()
