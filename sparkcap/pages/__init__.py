"""Jinja2 templates for every page sparkcap publishes, with autoescape on: a deployment or
expectation name is text wherever it lands, never markup. One stylesheet
(``templates/sparkcap.css``) serves the report and the data-quality page."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jinja2
import pandas as pd


@functools.cache
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("sparkcap.pages", "templates"),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html", "j2")),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)


def table(frame: pd.DataFrame, columns: Mapping[str, str], empty: str, missing: str = "—") -> str:
    """An HTML table of ``columns`` (name → header); ``missing`` is what an absent value reads
    as (a comparison says the deployment was not measured in that run, not a bare dash)."""
    rows: list[list[str]] = []
    for _, row in frame.iterrows():
        cells = []
        for k in columns:
            v = row[k]
            if v is None or (pd.api.types.is_scalar(v) and pd.isna(v)):
                cells.append(missing)
            elif isinstance(v, float):
                cells.append(f"{v:.1f}")
            else:
                cells.append(str(v))
        rows.append(cells)
    # plain str: the caller splices it into a section (a Markup on the left of ``+`` would
    # escape the section's own tags); the page marks whole sections safe
    return render("table.html.j2", headers=list(columns.values()), rows=rows, empty=empty)
