"""Published pages escape what they show: a name is text, never markup."""

from __future__ import annotations

import pandas as pd

from sparkcap.pages import render, table


def test_table_escapes_cells_and_says_what_is_missing() -> None:
    frame = pd.DataFrame([{"deployment": "<script>x</script>", "capacity": None, "rate": 19.97}])
    out = table(
        frame,
        {"deployment": "deployment", "capacity": "cap", "rate": "tok/s"},
        "none",
        missing="not measured in this run",
    )
    assert "<script>" not in out and "&lt;script&gt;" in out
    assert "<td>not measured in this run</td>" in out and "<td>20.0</td>" in out
    assert table(frame.iloc[0:0], {"deployment": "d"}, "No <rows>") == (
        "<p class='muted'>No &lt;rows&gt;</p>"
    )


def test_both_pages_share_one_stylesheet_and_escape_names() -> None:
    dq = render(
        "dq_summary.html.j2",
        run_id="r<1>",
        n_fail=1,
        expectations=[{"suite": "s", "name": "e<b>", "blocking": True}],
        groups=[
            {
                "label": "a&b / code",
                "cells": [
                    {"offending": 2, "cls": "fail", "verdict": "FAIL", "tip": "offending: '1'"}
                ],
            }
        ],
        docs_href=None,
        failed_whys=[{"name": "e<b>", "why": "a <why> & its words"}],
    )
    page = render(
        "page.html.j2",
        title="run <x>",
        subtitle="s",
        vega_bundle="",
        body="",
        charts_json="{}",
    )
    assert "r&lt;1&gt;" in dq and "e&lt;b&gt;" in dq and "a&amp;b / code" in dq
    assert "<dd>a &lt;why&gt; &amp; its words</dd>" in dq  # a failed expectation, in words
    assert "run &lt;x&gt;" in page
    css = "table { border-collapse: collapse; font-size: 0.85rem; }"
    assert css in dq and css in page
