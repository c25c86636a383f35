"""Data-quality gates with Great Expectations, over frames read from the warehouse.

GX Core 1.x has no DuckDB datasource, so each suite validates a pandas DataFrame read from
dbt's views: one row per request (``int_dq_requests``: chunk checks aggregated in SQL first, so
a night of 10 M chunk rows never passes through pandas), one per wave (``int_dq_waves``), one
per level. The suites live in ``expectations/*.json`` (reviewed in git); ``$name`` values
in them are filled from :class:`DQConfig`.

Results land in ``raw.dq_results``: one overall row per expectation and one row per wave with
offending rows, so dbt can mark exactly those trials invalid (blocking expectations only) and
so data quality can be queried across nights.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from sparkcap import resources
from sparkcap.dq.offline import make_offline
from sparkcap.dq.summary import render_summary_html
from sparkcap.errors import NotFound
from sparkcap.settings import get_settings, note_build
from sparkcap.store.connection import open_warehouse
from sparkcap.store.schema import RAW_TABLES, raw_table
from sparkcap.store.staging import replace_run_rows
from sparkcap.transform.dbt_build import run_models

# probe requests are another population: a long prompt, short probe replies, a warm cache
# check. They never feed a capacity, so the length rules for code and prose do not apply to
# them; their own suite only checks that what was recorded is whole (and blocks nothing).
SUITES = ("requests", "waves", "levels", "probe_requests")
OPTIONAL_SUITES = ("probe_requests",)  # skipped when the run has no rows for them
SAMPLE_IDS = 10


# The frames are dbt models (views), so a stream's TTFT and a wave's failure rate are the
# figures every mart has, never a second formula here. The views read nothing that depends on
# data-quality results (int_trials reads these results, so validation comes first).
DQ_MODELS = ("int_dq_requests", "int_dq_waves")

REQUESTS_SQL = """
select * exclude (run_id, is_probe_request)
from intermediate.int_dq_requests
where run_id = $run_id and is_probe_request = $probes
order by request_id
"""

WAVES_SQL = """
select * exclude (run_id)
from intermediate.int_dq_waves
where run_id = $run_id
order by wave_id
"""

LEVELS_SQL = """
select
    deployment || '/' || workload || '/c' || concurrency as level_key,
    deployment, workload, concurrency,
    bool_or(trial = 0) as has_warmup
from staging.stg_waves
where run_id = $run_id and probe is null
group by all
order by level_key
"""


class DQConfig(BaseModel):
    """Thresholds the suites refer to as ``$name``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prose_length_tolerance: float = Field(0.05, ge=0, lt=1)
    max_failure_rate: float = Field(0.1, ge=0, le=1)

    def params(self) -> dict[str, float]:
        return {
            "prose_min_length_ratio": 1.0 - self.prose_length_tolerance,
            "max_failure_rate": self.max_failure_rate,
        }


@dataclass
class ExpectationOutcome:
    suite: str
    expectation: str
    expectation_type: str
    blocking: bool
    success: bool
    element_count: int | None
    unexpected_count: int | None
    observed_value: str | None
    sample_ids: list[str]
    why: str
    by_group: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ValidationResult:
    run_id: str
    outcomes: list[ExpectationOutcome]
    data_docs_index: Path | None
    summary_page: Path | None

    @property
    def blocking_failures(self) -> list[ExpectationOutcome]:
        return [o for o in self.outcomes if o.blocking and not o.success]

    @property
    def success(self) -> bool:
        return not self.blocking_failures


def load_suite_spec(name: str, directory: Path | None = None) -> dict[str, Any]:
    folder = directory if directory is not None else resources.expectations_dir()
    spec: dict[str, Any] = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
    return spec


def _substitute(value: Any, params: dict[str, float]) -> Any:
    if isinstance(value, str) and value.startswith("$"):
        key = value[1:]
        if key not in params:
            raise KeyError(f"expectation parameter {value} is not defined")
        return params[key]
    if isinstance(value, list):
        return [_substitute(v, params) for v in value]
    return value


def _condition(clauses: list[list[Any]]) -> Any:
    """``[["workload", "==", "code"], ["finished", "==", true]]`` as a GX row condition."""
    from great_expectations.expectations.row_conditions import Column

    ops = {
        "==": lambda c, v: c == v,
        "!=": lambda c, v: c != v,
        ">": lambda c, v: c > v,
        ">=": lambda c, v: c >= v,
        "<": lambda c, v: c < v,
        "<=": lambda c, v: c <= v,
    }
    cond = None
    for column, op, value in clauses:
        if op not in ops:
            raise ValueError(f"unsupported operator {op!r} in an expectation's 'where'")
        term = ops[op](Column(name=column), value)
        cond = term if cond is None else cond & term
    return cond


def build_frames(db_path: Path, dbt_vars: dict[str, Any] | None = None) -> None:
    """Build the frames' views and their parents: validation runs before the night's build,
    on a warehouse that may never have been built. Measured on the 2-core machine, a small
    warehouse: +3 s per validation (run_validation 3.0 -> 6.1 s), dbt's import, parse and
    nine nodes; the stream rates of runs already built are not recomputed."""
    run_models(db_path, [f"+{name}" for name in DQ_MODELS], dbt_vars)


def frames(db_path: Path, run_id: str) -> dict[str, pd.DataFrame]:
    """The suites' frames of one run, read from the views ``build_frames`` built."""
    with open_warehouse(db_path, read_only=True) as con:
        out = {}
        queries: tuple[tuple[str, str, dict[str, bool]], ...] = (
            ("requests", REQUESTS_SQL, {"probes": False}),
            ("probe_requests", REQUESTS_SQL, {"probes": True}),
            ("waves", WAVES_SQL, {}),
            ("levels", LEVELS_SQL, {}),
        )
        for name, sql, extra in queries:
            params = {"run_id": run_id, **extra}
            out[name] = con.sql(sql, params=params).to_arrow_table().to_pandas()
    return out


def latest_run_id(db_path: Path) -> str:
    """The newest run with sweep waves: probe-only and link-check runs have nothing the
    suites judge, so taking them by default would only end in an error."""
    with open_warehouse(db_path, read_only=True) as con:
        rows = con.execute(
            "select run_id from raw.runs r where exists (select 1 from raw.waves w "
            "where w.run_id = r.run_id and w.probe is null) order by started_at desc limit 1"
        ).fetchall()
        (n_runs,) = con.execute("select count(*) from raw.runs").fetchone() or (0,)
    if not rows:
        if n_runs:
            raise NotFound(
                f"none of the {n_runs} run(s) in {db_path} has sweep waves to validate "
                "(probe-only and link-check runs are skipped)"
            )
        raise NotFound(f"no runs in {db_path}")
    return str(rows[0][0])


def _gx_context() -> Any:
    """An in-memory context: the suites and validation definitions are made again from
    ``expectations/`` on every validation, and the data docs are written to the run's own
    folder, so nothing of GX's needs to outlive the call. A file context wrote each suite and
    definition to YAML and read its config back (~140 YAML loads a validation), and two
    validations in two processes shared its folder."""
    os.environ["GX_ANALYTICS_ENABLED"] = "False"
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    # without a config of ours GX makes a docs site in a new temporary folder per context, left
    # behind in /tmp; the run's site is set below
    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False)
    )
    context = gx.get_context(mode="ephemeral", project_config=config)
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return context


def run_validation(
    db_path: Path,
    run_id: str | None = None,
    *,
    config: DQConfig | None = None,
    docs_dir: Path | None = None,
    expectations_dir: Path | None = None,
    dbt_vars: dict[str, Any] | None = None,
) -> ValidationResult:
    """Validate one run (the latest by default) and store the results in the warehouse.

    ``dbt_vars`` are the night's build vars: the views' parents are incremental tables that
    store the settings they were built with, and a build with other settings rebuilds them."""
    started, cpu_started = time.perf_counter(), time.process_time()
    import great_expectations as gx

    db_path = Path(db_path)
    run_id = run_id or latest_run_id(db_path)
    cfg = config or DQConfig()
    params = cfg.params()
    build_frames(db_path, dbt_vars)
    data = frames(db_path, run_id)
    if data["waves"].empty:
        raise NotFound(
            f"run {run_id} has no sweep waves in {db_path} (a probe-only run: its probe "
            "requests are checked with the sweep run they belong to)"
        )

    # a context of this call's: its docs show this run's validations, the warehouse keeps
    # the history
    context = _gx_context()
    source = context.data_sources.add_or_update_pandas(name="sparkcap")

    outcomes: list[ExpectationOutcome] = []
    validation_definitions = []
    specs = {}
    suites = [n for n in SUITES if n not in OPTIONAL_SUITES or not data[n].empty]
    for suite_name in suites:
        spec = load_suite_spec(suite_name, expectations_dir)
        specs[suite_name] = spec
        try:
            asset = source.get_asset(suite_name)
        except LookupError:
            asset = source.add_dataframe_asset(name=suite_name)
        try:
            batch_def = asset.get_batch_definition("run")
        except (KeyError, LookupError):
            batch_def = asset.add_batch_definition_whole_dataframe("run")
        suite = gx.ExpectationSuite(name=f"sparkcap.{suite_name}")
        for e in spec["expectations"]:
            kwargs = {k: _substitute(v, params) for k, v in e["kwargs"].items()}
            if e.get("where"):
                kwargs["row_condition"] = _condition(e["where"])
            cls = getattr(gx.expectations, e["type"])
            suite.add_expectation(
                cls(
                    **kwargs,
                    meta={"sparkcap_id": e["id"], "blocking": e["blocking"], "why": e["why"]},
                )
            )
        suite = context.suites.add_or_update(suite)
        vd = context.validation_definitions.add_or_update(
            gx.ValidationDefinition(name=f"sparkcap.{suite_name}", data=batch_def, suite=suite)
        )
        validation_definitions.append((suite_name, vd))

    out_dir = (docs_dir or get_settings().reports_dir / run_id / "dq").resolve()
    site_dir = out_dir / "data_docs"
    context.variables.data_docs_sites = {
        "sparkcap_site": {
            "class_name": "SiteBuilder",
            "store_backend": {
                "class_name": "TupleFilesystemStoreBackend",
                "base_directory": str(site_dir),
            },
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        }
    }
    for suite_name, vd in validation_definitions:
        spec = specs[suite_name]
        index_col = spec["index_column"]
        frame = data[suite_name]
        result = vd.run(
            batch_parameters={"dataframe": frame},
            result_format={
                "result_format": "COMPLETE",
                "unexpected_index_column_names": [index_col],
            },
        )
        for r in result.results:
            meta = r.expectation_config.meta or {}
            res = r.result or {}
            idx = [
                str(row.get(index_col))
                for row in (res.get("unexpected_index_list") or [])
                if isinstance(row, dict)
            ]
            observed = res.get("observed_value")
            outcomes.append(
                ExpectationOutcome(
                    suite=suite_name,
                    expectation=str(meta.get("sparkcap_id", r.expectation_config.type)),
                    expectation_type=r.expectation_config.type,
                    blocking=bool(meta.get("blocking", True)),
                    success=bool(r.success),
                    element_count=res.get("element_count"),
                    unexpected_count=res.get("unexpected_count"),
                    observed_value=None if observed is None else str(observed),
                    sample_ids=idx,
                    why=str(meta.get("why", "")),
                    by_group=_group_offenders(frame, index_col, idx),
                )
            )
    context.build_data_docs(site_names=["sparkcap_site"])
    index = site_dir / "index.html"

    make_offline(site_dir)
    store_results(db_path, run_id, outcomes)

    docs_index = index if index.exists() else None
    summary = render_summary_html(db_path, run_id, docs_index, site_dir.parent / "summary.html")
    note_build(
        "gx",
        f"validation of {len(specs)} suites",
        time.perf_counter() - started,
        time.process_time() - cpu_started,
    )
    return ValidationResult(run_id, outcomes, docs_index, summary)


def _group_offenders(frame: pd.DataFrame, index_col: str, ids: list[str]) -> list[dict[str, Any]]:
    """Offending rows grouped by wave (requests, waves) so dbt can invalidate those trials."""
    if not ids:
        return []
    bad = frame[frame[index_col].astype(str).isin(set(ids))]
    if "wave_id" not in bad.columns:
        groups: list[dict[str, Any]] = []
        for (dep, wl, conc), g in bad.groupby(["deployment", "workload", "concurrency"]):
            groups.append(
                {
                    "wave_id": None,
                    "deployment": dep,
                    "workload": wl,
                    "concurrency": int(conc),
                    "trial": None,
                    "ids": g[index_col].astype(str).tolist(),
                }
            )
        return groups
    out = []
    for wave_id, g in bad.groupby("wave_id"):
        first = g.iloc[0]
        out.append(
            {
                "wave_id": str(wave_id),
                "deployment": first["deployment"],
                "workload": first["workload"],
                "concurrency": int(first["concurrency"]),
                "trial": int(first["trial"]),
                "ids": g[index_col].astype(str).tolist(),
            }
        )
    return out


def store_results(db_path: Path, run_id: str, outcomes: list[ExpectationOutcome]) -> None:
    now = datetime.now(UTC)
    rows: dict[str, list[Any]] = {name: [] for name in RAW_TABLES["dq_results"].names}

    def add(o: ExpectationOutcome, g: dict[str, Any] | None) -> None:
        ids = g["ids"] if g else o.sample_ids
        vals = {
            "run_id": run_id,
            "wave_id": g["wave_id"] if g else None,
            "deployment": g["deployment"] if g else None,
            "workload": g["workload"] if g else None,
            "concurrency": g["concurrency"] if g else None,
            "trial": g["trial"] if g else None,
            "suite": o.suite,
            "expectation": o.expectation,
            "expectation_type": o.expectation_type,
            "blocking": o.blocking,
            "success": o.success if g is None else False,
            "observed_value": o.observed_value if g is None else None,
            "element_count": o.element_count if g is None else None,
            "unexpected_count": o.unexpected_count if g is None else len(ids),
            "sample_ids": ", ".join(ids[:SAMPLE_IDS]) or None,
            "validated_at": now,
        }
        for k, v in vals.items():
            rows[k].append(v)

    for o in outcomes:
        add(o, None)
        for g in o.by_group:
            add(o, g)
    table = raw_table("dq_results", rows)
    replace_run_rows(db_path, "raw.dq_results", run_id, table)
