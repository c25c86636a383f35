"""``sparkcap build``: run ``dbt build`` (models and their tests) against the warehouse.

dbt runs in-process through ``dbtRunner`` on one DuckDB connection per invocation
(``keep_open: true``: a connection per node spent a quarter of a build opening and attaching the
file), closed as soon as dbt returns so the file is released; its target and log folders go to
the working area, not the source tree.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkcap.errors import BuildError
from sparkcap.resources import dbt_project_dir
from sparkcap.settings import get_settings, note_build
from sparkcap.store.connection import ensure_schema, open_warehouse


@dataclass
class BuildResult:
    success: bool
    failures: list[str] = field(default_factory=list)
    n_nodes: int = 0
    n_unit_tests: int = 0


def dbt_args(
    command: str,
    db_path: Path,
    extra: list[str] | None = None,
    dbt_vars: dict[str, Any] | None = None,
) -> list[str]:
    work = get_settings().work_dir
    project = str(dbt_project_dir())
    dbt_vars = {**environment_vars(), **(dbt_vars or {})}
    check_vars(dbt_vars)
    args = [
        command,
        "--project-dir",
        project,
        "--profiles-dir",
        project,
        "--target-path",
        str((work / "dbt-target").resolve()),
        "--log-path",
        str((work / "dbt-logs").resolve()),
        "--quiet",
        # nothing of dbt's on the console: a failure reaches the person as one line of ours
        # (BuildError, from the results), the whole story in the log file
        "--log-level",
        "none",
        "--log-level-file",
        "debug",
        # manifest.json and run_results.json: nothing reads them (the manifest is kept in
        # SPARKCAP_CACHE, the results come back from the invocation), and writing the
        # manifest's JSON took ~0.9 s of each invocation's ~2.5 s (a validation's dbt run)
        "--no-write-json",
    ]
    if dbt_vars:
        args += ["--vars", json.dumps(dbt_vars)]
    return args + (extra or [])


def _release_dbt_logs() -> None:
    """Close dbt's log file: it keeps one open per invocation, leaking a handle per build."""
    from dbt_common.events.event_manager_client import cleanup_event_logger, get_event_manager

    for logger in list(get_event_manager().loggers):
        python_logger = getattr(logger, "_python_logger", None)
        for handler in list(getattr(python_logger, "handlers", [])):
            handler.close()
    cleanup_event_logger()


# parsed manifests of this process, by what a parse depends on: dbt's parse is ~4 s of every
# invocation, and a night (validation's views, then the build) or a test worker invokes dbt many
# times on the same project with the same vars
_MANIFESTS: dict[str, Any] = {}
_MANIFESTS_KEPT = 4
_MANIFEST_LOCK = threading.Lock()


def _project_state(project: Path) -> str:
    """Every file of the dbt project by path, size and mtime: an edited model is a new parse."""
    parts = []
    for path in sorted(project.rglob("*")):
        if path.is_file() and "target" not in path.relative_to(project).parts[:1]:
            stat = path.stat()
            parts.append(f"{path.relative_to(project)}:{stat.st_size}:{stat.st_mtime_ns}")
    return "\n".join(parts)


def _manifest_key(args: list[str]) -> str:
    """What the parse depends on: the versions of dbt and its adapter (their macros are in the
    manifest) and of Python and the project's files. Not the warehouse: the profile attaches
    the file under a fixed name, so a manifest parsed for one warehouse is the manifest of
    every other (the connection comes from this invocation's profile). Not the invocation's
    ``--vars`` either: the project reads vars only where a node is compiled, which each
    invocation does with its own (no var decides a config, a ref or a test's arguments:
    tests/unit/transform/test_dbt_build.py holds the project to that), and the parse runs
    with the project's defaults. Keyed by the vars, each new threshold or tolerance cost a
    parse of ~4-5 CPU-s (a `sparkcap build --threshold 25`, most of the suite's builds)."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "-"

    packages = ("dbt-core", "dbt-adapters", "dbt-common", "dbt-duckdb", "duckdb")
    versions = " ".join(f"{n}={installed(n)}" for n in packages) + f" python={sys.version}"
    project = dbt_project_dir()
    state = f"{versions}\0{project.resolve()}\0{_project_state(project)}"
    return hashlib.sha256(state.encode()).hexdigest()


def _manifest_file(key: str) -> Path:
    return get_settings().cache_dir / "dbt-manifests" / f"{key}.msgpack"


def _stored_manifest(key: str) -> Any | None:
    """A manifest an earlier process parsed with the same key, in dbt's own partial-parse
    format (msgpack, data only): reading it takes ~0.2 s where a parse takes ~5 s of CPU, and
    every `sparkcap` command, Prefect flow-run process and test process that builds starts
    cold. Anything unreadable is parsed again."""
    from dbt.contracts.graph.manifest import Manifest
    from dbt.parser.manifest import extended_mashumuro_decoder

    path = _manifest_file(key)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        return Manifest.from_msgpack(data, decoder=extended_mashumuro_decoder)
    except Exception:  # a damaged or foreign file is only a cache miss
        return None


def _store_manifest(key: str, manifest: Any) -> None:
    """Kept for the next process; a full disk or a read-only cache only costs that process a
    parse. Written under a temporary name and renamed, so a reader never sees half a file."""
    from dbt.parser.manifest import extended_mashumaro_encoder

    path = _manifest_file(key)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(manifest.to_msgpack(extended_mashumaro_encoder))
        partial.replace(path)
    except (OSError, TypeError, ValueError):
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)


def _parsed_manifest(args: list[str]) -> Any | None:
    """The manifest for these args, parsed once per process and kept for the next process in
    the cache folder; None where the parse failed, so the invocation itself parses and reports
    the project's error."""
    from dbt.cli.main import dbtRunner

    key = _manifest_key(args)
    with _MANIFEST_LOCK:
        if key in _MANIFESTS:
            return _MANIFESTS[key]
    manifest = _stored_manifest(key)
    if manifest is None:
        parse_args = ["parse", *_parse_arguments(args[1:])]
        try:
            res = dbtRunner().invoke(parse_args)
        finally:
            _release_warehouse()
            _release_dbt_logs()
        if not res.success or res.result is None:
            return None
        manifest = res.result
        _store_manifest(key, manifest)
    with _MANIFEST_LOCK:
        while len(_MANIFESTS) >= _MANIFESTS_KEPT:
            _MANIFESTS.pop(next(iter(_MANIFESTS)))
        _MANIFESTS[key] = manifest
    return manifest


def _parse_arguments(args: list[str]) -> list[str]:
    """The invocation's arguments ``dbt parse`` takes: not its node selection, how tests
    follow it, or ``--full-refresh`` (``dbt parse`` refuses them), nor its ``--vars`` (the
    manifest is every invocation's: see ``_manifest_key``)."""
    out: list[str] = []
    skipping = False
    for arg in args:
        if arg in ("--select", "--exclude", "-s", "--indirect-selection", "--vars"):
            skipping = True
            continue
        if skipping and not arg.startswith("--"):
            continue
        skipping = False
        if arg != "--full-refresh":
            out.append(arg)
    return out


def _release_warehouse() -> None:
    """Close the connection dbt-duckdb keeps open (``keep_open: true``) so the warehouse file is
    free for the next writer the moment dbt returns, and the next invocation attaches its own."""
    from dbt.adapters.duckdb.connections import DuckDBConnectionManager

    with DuckDBConnectionManager._LOCK:
        env = DuckDBConnectionManager._ENV
        DuckDBConnectionManager._ENV = None
        if env is not None:
            env.close()


@contextlib.contextmanager
def dbt_command_line(args: list[str]) -> Iterator[None]:
    """The process's command line as dbt's own while dbt runs: dbt logs ``sys.argv`` as its
    "invocation_command", and a `sparkcap sweep --header "x-api-key: …"` that builds the marts
    or compiles a rule would otherwise write that secret into dbt.log."""
    argv, sys.argv = sys.argv, ["dbt", *args]
    try:
        yield
    finally:
        sys.argv = argv


def run_dbt(
    command: str,
    db_path: Path,
    extra: list[str] | None = None,
    dbt_vars: dict[str, Any] | None = None,
) -> BuildResult:
    from dbt.cli.main import dbtRunner

    db_path = Path(db_path).resolve()
    # the raw schema must exist even for a warehouse that has never been swept
    with open_warehouse(db_path) as con:
        ensure_schema(con)
    os.environ["SPARKCAP_DB"] = str(db_path)
    os.environ.setdefault("DBT_SEND_ANONYMOUS_USAGE_STATS", "False")
    args = dbt_args(command, db_path, extra, dbt_vars)
    started, cpu_started = time.perf_counter(), time.process_time()
    try:
        with dbt_command_line(args):
            manifest = _parsed_manifest(args) if command != "parse" else None
            res = dbtRunner(manifest=manifest).invoke(args)
    finally:
        _release_warehouse()
        _release_dbt_logs()
        selected = extra is not None and "--select" in extra
        note_build(
            "dbt",
            f"{command} {'selected' if selected else 'all'}",
            time.perf_counter() - started,
            time.process_time() - cpu_started,
        )
    failures: list[str] = []
    n = 0
    results = getattr(res.result, "results", None) or []
    n_unit = 0
    for r in results:
        n += 1
        n_unit += str(getattr(getattr(r, "node", None), "resource_type", "")) == "unit_test"
        status = str(getattr(r, "status", ""))
        if status in ("error", "fail", "runtime error"):
            node = getattr(r, "node", None)
            name = getattr(node, "name", "?")
            msg = _cause_line(getattr(r, "message", "") or "")
            broken = _broken_column_rules(db_path, node) if status == "fail" else None
            failures.append(f"{name}: {broken or msg or status}")
    if res.exception is not None and not failures:
        failures.append(_cause_line(str(res.exception)) or type(res.exception).__name__)
    return BuildResult(success=bool(res.success), failures=failures, n_nodes=n, n_unit_tests=n_unit)


def _cause_line(message: str) -> str:
    """The line of a dbt message that says what went wrong ("Catalog Error: Table with name
    x does not exist!"), past dbt's own heading ("Runtime Error in model x (path)")."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    causes = [line for line in lines if not re.match(r"^\w+ Error in \w+ ", line)]
    return (causes or lines or [""])[0]


def _broken_column_rules(db_path: Path, node: Any) -> str | None:
    """What a failed ``column_rules`` test found, rule by rule ("not_null run_id: 3 rows"):
    one test holds a model's column rules (dbt/macros/test_column_rules.sql), so dbt's own
    "Got 2 results" would not say which column broke. Its compiled query is read again,
    read-only, after dbt has released the file; None where it cannot be."""
    metadata = getattr(node, "test_metadata", None)
    sql = getattr(node, "compiled_code", None)
    if getattr(metadata, "name", None) != "column_rules" or not sql:
        return None
    try:
        with open_warehouse(db_path, read_only=True) as con:
            rows = con.execute(f"select * from ({sql}) order by 1, 2").fetchall()
    except Exception:  # the message only: the build's failure stands as dbt reported it
        return None
    return ", ".join(f"{rule} {column}: {n_rows} rows" for rule, column, n_rows in rows) or None


# 0 would judge every wave spoiled (a tolerance) or divide by nothing
_POSITIVE_VARS = {
    "threshold_tok_s",
    "ttft_ceiling_s",
    "energy_max_sensor_w",
    "probe_window_s",
    "probe_step_s",
    "bootstrap_samples",
    "queued_ttft_factor",
    "timing_error_tolerance",
    "start_skew_tolerance",
    "open_loop_rate_step_pct",
    "open_loop_grid_points",
    "open_loop_max_in_flight",
}


# counts and seeds: 200.5 resamples or 7.5 baseline nights has no meaning, and dbt would take
# the fraction into a range() or a rank; every other numeric var is a rate, share or time
WHOLE_NUMBER_VARS = {
    "bootstrap_samples",
    "bootstrap_seed",
    "search_min_samples",
    "change_baseline_runs",
    "change_min_baseline_runs",
    "change_permutations",
    "drift_window_runs",
    "plan_long_prompt_tokens",
    "plan_max_servers",
    "open_loop_grid_points",
    "open_loop_max_in_flight",
}


_SHARE = (0.0, 1.0)
# the range each numeric var has a meaning in (inclusive, besides _POSITIVE_VARS and
# _BELOW_HIGH_VARS): a share past 1, a threshold that passes every level, a count whose size
# is the memory and time every night's build takes (each model's rows grow with it) is
# refused by name before dbt runs. A unit test holds this table to dbt_project.yml's vars.
VAR_LIMITS: dict[str, tuple[float, float]] = {
    "threshold_tok_s": (0, 100_000),
    "bootstrap_samples": (1, 10_000),
    "bootstrap_seed": (0, 2**31 - 1),
    "ci_low_pct": _SHARE,
    "ci_high_pct": _SHARE,
    "timing_error_tolerance": _SHARE,
    "start_skew_tolerance": _SHARE,
    "queued_ttft_factor": (0, 1_000),
    "queued_ttft_min_s": (0, 3_600),
    "overlap_stamp_slack_ms": (0, 60_000),
    "probe_window_s": (0, 3_600),
    "probe_step_s": (0, 3_600),
    "dip_share": _SHARE,
    "search_min_samples": (1, 1_000),
    "bound_above_tolerance": (1, 100),
    "bound_far_below_share": _SHARE,
    "bandwidth_bound_share": _SHARE,
    "kv_full_usage": _SHARE,
    "prefill_phase_share": _SHARE,
    "change_baseline_runs": (1, 365),
    "change_min_baseline_runs": (1, 365),
    "change_false_alarm_rate": _SHARE,
    "change_min_effect_pct": (0, 1_000),
    "change_permutations": (1, 100_000),
    "drift_window_runs": (2, 365),
    "drift_min_pct_per_run": (0, 1_000),
    "tier_thresholds_tok_s": (0, 100_000),
    "tier_ttft_p90_ceilings_s": (0, 86_400),
    "ttft_ceiling_s": (0, 86_400),
    "ttft_quantile": _SHARE,
    "tail_confidence": _SHARE,
    "replay_warmup_share": (0, 0.9),
    "replay_max_send_lag_s": (0, 3_600),
    "replay_climb_share": (0, 100),
    "replay_climb_min_streams": (0, 100_000),
    "replay_prediction_tolerance": (0, 100),
    "replay_max_late_share": _SHARE,
    "cache_hit_min_share": _SHARE,
    "cold_cached_max_share": _SHARE,
    "energy_max_sensor_w": (0, 10_000_000),
    "plan_code_share": _SHARE,
    "plan_long_prompts_per_min": (0, 10_000),
    "plan_long_prompt_tokens": (1, 10_000_000),
    "plan_max_below_threshold_share": _SHARE,
    "open_loop_rate_step_pct": (0, 100),
    "open_loop_grid_points": (10, 5_000),
    "open_loop_max_in_flight": (1, 4_096),
    "think_time_s": (0, 86_400),
    "plan_max_servers": (1, 64),
}
# a quantile or confidence of 1 asks for infinitely many samples (macro tail_min_samples)
_BELOW_HIGH_VARS = {"ttft_quantile", "tail_confidence"}


def var_refusal(name: str, number: float) -> str | None:
    """Why ``number`` is no value for var ``name`` (None: it is one): finite, within
    VAR_LIMITS, above 0 where 0 means nothing, whole where it counts."""
    if number != number or number in (float("inf"), float("-inf")):
        return "must be a finite number"
    low, high = VAR_LIMITS.get(name, (0.0, float("inf")))
    if number < low or number > high or (name in _BELOW_HIGH_VARS and number >= high):
        upper = "below" if name in _BELOW_HIGH_VARS else "at most"
        lower = "greater than" if name in _POSITIVE_VARS and low == 0 else "at least"
        return f"must be {lower} {low:g} and {upper} {high:g}"
    if number == 0 and name in _POSITIVE_VARS:
        return "must be greater than 0"
    if name in WHOLE_NUMBER_VARS and not float(number).is_integer():
        return "must be a whole number (a count)"
    return None


def check_vars(dbt_vars: dict[str, Any], source: str = "dbt var") -> None:
    """Every numeric var a build is about to run with, and the pairs that must be ordered
    (with the project's defaults for those not given): one line naming the first that is no
    value, before dbt runs."""
    for name, value in dbt_vars.items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, bool) or not isinstance(item, int | float):
                continue  # a var's type is dbt's to refuse; only numbers have ranges here
            why = var_refusal(name, float(item))
            if why:
                raise BuildError(f"{source} {name}: {item!r} {why}")
    merged = {**known_vars(), **dbt_vars}
    for low, high in (("ci_low_pct", "ci_high_pct"), ("change_min_baseline_runs",
                                                       "change_baseline_runs")):  # fmt: skip
        if float(merged[low]) > float(merged[high]):
            raise BuildError(
                f"{source} {low}: {merged[low]!r} must not exceed {high} ({merged[high]!r})"
            )


def known_vars() -> dict[str, Any]:
    """The dbt vars the project declares, with their defaults (dbt/dbt_project.yml)."""
    import yaml

    project = yaml.safe_load((dbt_project_dir() / "dbt_project.yml").read_text())
    return dict(project.get("vars") or {})


def _number(source: str, name: str, value: str) -> float | int:
    try:
        number = float(value)
    except ValueError:
        raise BuildError(f"{source} {name}: {value!r} is not a number") from None
    why = var_refusal(name, number)
    if why:
        raise BuildError(f"{source} {name}: {value!r} {why}")
    # a whole number stays an int, as the project's own defaults are (threshold_tok_s: 20):
    # the models cast what they format (printf's %g refuses an integer)
    return int(number) if number.is_integer() else number


def parse_var_overrides(
    items: list[str], source: str = "--var"
) -> dict[str, float | int | list[float | int]]:
    """``NAME=NUMBER`` pairs for ``sparkcap build --var`` (and ``SPARKCAP_DBT_VARS``); a typo
    must not silently do nothing, so only declared vars are accepted. A var the project
    declares as a list (the capacity tiers' thresholds and TTFT ceilings) takes
    ``NAME=10/20/30`` (or ``[10, 20, 30]``), each a number as above."""
    known = known_vars()
    out: dict[str, float | int | list[float | int]] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise BuildError(f"{source} {item!r}: expected NAME=NUMBER")
        if name not in known:
            raise BuildError(
                f"{source} {name}: unknown dbt var (known: {', '.join(sorted(known))})"
            )
        if isinstance(known[name], list):
            parts = [p.strip() for p in value.strip().strip("[]").replace(",", "/").split("/")]
            if not parts or any(not p for p in parts):
                raise BuildError(f"{source} {name}: expected numbers like 10/20/30, got {value!r}")
            out[name] = [_number(source, name, p) for p in parts]
        else:
            out[name] = _number(source, name, value)
    return out


def environment_vars() -> dict[str, float | int | list[float | int]]:
    """``SPARKCAP_DBT_VARS``, checked as ``--var`` is."""
    given = get_settings().dbt_vars
    return parse_var_overrides([f"{k}={v!r}" for k, v in given.items()], "SPARKCAP_DBT_VARS")


def judgement_vars() -> dict[str, Any]:
    """Every dbt var as a build in this environment judges with: the project's defaults and
    ``SPARKCAP_DBT_VARS``. The capture reads its re-measure tolerances from here, so a wave is
    measured again exactly when dbt would call it spoiled."""
    return {**known_vars(), **environment_vars()}


def build(
    db_path: Path,
    *,
    full_refresh: bool = False,
    select: str | None = None,
    dbt_vars: dict[str, Any] | None = None,
    unit_tests: bool = False,
) -> BuildResult:
    """Models and their data tests. dbt's unit tests check the formulas, not the night's
    data (dbt: run them in development and CI, not in production), so a nightly build
    leaves them out — ~4 s each — unless ``unit_tests``; ``make test`` runs them once."""
    extra: list[str] = []
    if full_refresh:
        extra.append("--full-refresh")
    if select:
        # a selection's data tests run when every model they read was built: dbt's default
        # (eager) would also run a relationships test whose other side was never built here
        extra += ["--select", select, "--indirect-selection", "cautious"]
    if not unit_tests:
        extra += ["--exclude", "test_type:unit"]
    return _succeeded(run_dbt("build", db_path, extra, dbt_vars), "dbt build")


def run_models(
    db_path: Path, select: list[str], dbt_vars: dict[str, Any] | None = None
) -> BuildResult:
    """``dbt run --select …``: only these models, no tests, for a step that reads a few models
    before the night's build (validation reads its frames from views)."""
    return _succeeded(run_dbt("run", db_path, ["--select", *select], dbt_vars), "dbt run")


def _succeeded(result: BuildResult, what: str) -> BuildResult:
    if not result.success:
        shown = "; ".join(result.failures[:3]) or "see the dbt log"
        more = f" (+{len(result.failures) - 3} more)" if len(result.failures) > 3 else ""
        raise BuildError(f"{what} failed: {shown}{more}")
    return result
