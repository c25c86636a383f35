"""The one-page data-quality summary: per deployment × workload, each expectation's verdict.

Built from ``raw.dq_results`` (what was stored is what is shown), linked to the Data Docs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sparkcap import resources
from sparkcap.pages import render
from sparkcap.store.connection import open_warehouse

SUMMARY_SQL = """
with overall as (
    select suite, expectation, blocking, success, unexpected_count, element_count
    from raw.dq_results where run_id = $run_id and wave_id is null and deployment is null
),
per_group as (
    select deployment, workload, suite, expectation, sum(unexpected_count) as offending,
           string_agg(sample_ids, ', ') as samples
    from raw.dq_results
    where run_id = $run_id and (wave_id is not null or deployment is not null)
    group by all
),
groups as (
    select distinct deployment, workload from raw.waves where run_id = $run_id
)
select g.deployment, g.workload, o.suite, o.expectation, o.blocking,
       coalesce(p.offending, 0) as offending, p.samples, o.success as overall_success
from groups g cross join overall o
left join per_group p on p.deployment = g.deployment and p.workload = g.workload
    and p.suite = o.suite and p.expectation = o.expectation
order by g.deployment, g.workload, o.suite, o.expectation
"""


def expectation_whys() -> dict[tuple[str, str], str]:
    """Each shipped expectation's reason, by (suite, id): what a failure means, in words."""
    whys: dict[tuple[str, str], str] = {}
    for path in sorted(resources.expectations_dir().glob("*.json")):
        spec = json.loads(path.read_text(encoding="utf-8"))
        for e in spec.get("expectations", []):
            whys[(str(spec.get("suite", path.stem)), str(e["id"]))] = str(e.get("why", ""))
    return whys


def summary_rows(db_path: Path, run_id: str) -> list[tuple[object, ...]]:
    with open_warehouse(db_path, read_only=True) as con:
        return con.execute(SUMMARY_SQL, {"run_id": run_id}).fetchall()


def render_summary_html(db_path: Path, run_id: str, docs_index: Path | None, out: Path) -> Path:
    rows = summary_rows(db_path, run_id)
    expectations = sorted({(r[2], r[3], r[4]) for r in rows}, key=lambda e: (e[0], e[1]))
    groups = sorted({(r[0], r[1]) for r in rows})
    cell = {(r[0], r[1], r[2], r[3]): (r[5], r[6]) for r in rows}
    n_fail = 0
    failed: set[tuple[str, str]] = set()
    table_rows = []
    for dep, wl in groups:
        cells = []
        for suite, exp, blocking in expectations:
            offending, samples = cell.get((dep, wl, suite, exp), (0, None))
            if offending and blocking:
                n_fail += 1
                failed.add((str(suite), str(exp)))
            cells.append(
                {
                    "offending": offending,
                    "cls": "fail" if blocking else "warn",
                    "verdict": "FAIL" if blocking else "WARN",
                    "tip": f"offending: {samples}" if samples else "",
                }
            )
        table_rows.append({"label": f"{dep} / {wl}", "cells": cells})
    whys = expectation_whys()
    docs_href = (
        os.path.relpath(docs_index, out.parent).replace(os.sep, "/")
        if docs_index is not None
        else None
    )
    page = render(
        "dq_summary.html.j2",
        run_id=run_id,
        n_fail=n_fail,
        expectations=[{"suite": s, "name": e, "blocking": b} for s, e, b in expectations],
        # what each failed blocking expectation means, as its suite words it
        failed_whys=[{"name": e, "why": whys.get((s, e), "")} for s, e in sorted(failed, key=str)],
        groups=table_rows,
        docs_href=docs_href,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out
