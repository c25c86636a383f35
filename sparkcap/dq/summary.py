"""The one-page data-quality summary: per deployment × workload, each expectation's verdict.

Built from ``raw.dq_results`` (what was stored is what is shown), linked to the Data Docs.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

from sparkcap.warehouse import open_warehouse

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


def summary_rows(db_path: Path, run_id: str) -> list[tuple[object, ...]]:
    with open_warehouse(db_path, read_only=True) as con:
        return con.execute(SUMMARY_SQL, {"run_id": run_id}).fetchall()


def render_summary_html(db_path: Path, run_id: str, docs_index: Path | None, out: Path) -> Path:
    rows = summary_rows(db_path, run_id)
    expectations = sorted({(r[2], r[3], r[4]) for r in rows}, key=lambda e: (e[0], e[1]))
    groups = sorted({(r[0], r[1]) for r in rows})
    cell = {(r[0], r[1], r[2], r[3]): (r[5], r[6]) for r in rows}

    def esc(x: object) -> str:
        return html.escape(str(x))

    head = "".join(
        f"<th title='{esc(s)}'>{esc(e)}{' *' if b else ''}</th>" for s, e, b in expectations
    )
    body = []
    n_fail = 0
    for dep, wl in groups:
        tds = []
        for suite, exp, blocking in expectations:
            offending, samples = cell.get((dep, wl, suite, exp), (0, None))
            if offending:
                n_fail += 1 if blocking else 0
                cls = "fail" if blocking else "warn"
                tip = esc(f"offending: {samples}") if samples else ""
                tds.append(
                    f"<td class='{cls}' title='{tip}'>{'FAIL' if blocking else 'WARN'}"
                    f" ({offending})</td>"
                )
            else:
                tds.append("<td class='pass'>pass</td>")
        body.append(f"<tr><th>{esc(dep)} / {esc(wl)}</th>{''.join(tds)}</tr>")
    link = ""
    if docs_index is not None:
        rel = os.path.relpath(docs_index, out.parent).replace(os.sep, "/")
        link = f"<p><a href='{esc(rel)}'>Great Expectations Data Docs</a> (full results)</p>"
    verdict = (
        "<p class='fail'>Blocking expectations failed: the affected trials are excluded "
        "from capacity numbers.</p>"
        if n_fail
        else "<p class='pass'>Every blocking expectation passed.</p>"
    )
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Data quality — run {esc(run_id)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem; color: #222; }}
table {{ border-collapse: collapse; font-size: 0.85rem; }}
th, td {{ border: 1px solid #ccc; padding: 0.3rem 0.5rem; text-align: center; }}
thead th {{ writing-mode: vertical-rl; transform: rotate(180deg); white-space: nowrap; }}
tbody th {{ text-align: left; }}
.pass {{ color: #1a7f37; }} .fail {{ color: #fff; background: #cf222e; }}
.warn {{ background: #fff8c5; }} p.fail {{ padding: 0.4rem; }}
</style></head><body>
<h1>Data quality — run {esc(run_id)}</h1>
{verdict}
<table><thead><tr><th>deployment / workload</th>{head}</tr></thead>
<tbody>{"".join(body)}</tbody></table>
<p>* blocking: a failure marks the offending trials invalid. Hover a cell for offending ids.</p>
{link}
</body></html>
"""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out
