"""A link's line, worded from dbt's verdict on it."""

from __future__ import annotations

import pytest

from sparkcap.publish.marts import LinkRow
from sparkcap.publish.text.links import link_line


@pytest.mark.parametrize(
    ("link", "line"),
    [
        (LinkRow("ring", "lo", 12.5, 12.5, True, None), "ring/lo: 12.50 Gb/s of 12.5 nominal — ok"),
        (
            LinkRow("ring", "lo", 100.0, 40.0, False, None),
            "ring/lo: 40.00 Gb/s of 100 nominal — UNHEALTHY",
        ),
        (
            LinkRow("ring", "lo", 100.0, None, False, "timed out after 60 s"),
            "ring/lo: — of 100 nominal — FAILED (timed out after 60 s)",
        ),
    ],
)
def test_a_link_is_worded_from_dbts_verdict(link: LinkRow, line: str) -> None:
    assert link_line(link) == line
