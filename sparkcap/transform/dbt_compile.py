"""dbt's own macros compiled to SQL, for a decision taken outside a build.

A reader that must judge what no model covers (``sparkcap compare A B --fail-on regression``
judges any two runs; ``fct_capacity_regressions`` only each run against the one before it)
runs the macro the models run, never a copy of its SQL: ``dbt compile --inline`` against a
scratch warehouse (a macro over named relations reads nothing), once per process and vars.
The parse behind it is the builds' (``dbt_build._parsed_manifest``, kept in the cache folder),
so a compile costs about a second once the project was parsed.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from sparkcap.errors import BuildError
from sparkcap.transform.dbt_build import (
    _parsed_manifest,
    _release_dbt_logs,
    _release_warehouse,
    dbt_args,
    environment_vars,
)

_COMPILE_LOCK = threading.Lock()
_COMPILED: dict[str, str] = {}


def compile_inline(inline: str, dbt_vars: dict[str, Any] | None = None) -> str:
    """The SQL dbt compiles ``inline`` (Jinja calling the project's macros) to under these
    vars, cached by the text and every var dbt sees (SPARKCAP_DBT_VARS included);
    ``BuildError`` where dbt cannot (the project or its vars are broken)."""
    key = json.dumps([inline, {**environment_vars(), **(dbt_vars or {})}], sort_keys=True)
    with _COMPILE_LOCK:
        if key in _COMPILED:
            return _COMPILED[key]
        from dbt.cli.main import dbtRunner

        with tempfile.TemporaryDirectory(prefix="sparkcap-compile-") as tmp:
            scratch = Path(tmp) / "compile.duckdb"
            # dbt's profile reads the warehouse path from the environment: point it at a
            # scratch file for the compile (nothing is read from it), then put the real one back
            saved = os.environ.get("SPARKCAP_DB")
            os.environ["SPARKCAP_DB"] = str(scratch)
            try:
                manifest = _parsed_manifest(dbt_args("compile", scratch, None, dbt_vars))
                args = dbt_args(
                    "compile", scratch, ["--inline", inline, "--log-level", "none"], dbt_vars
                )
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
        return _COMPILED[key]
