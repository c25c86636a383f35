"""The Prefect artifact's table: the fleet's line, and each verdict kept in its cell whatever
text a server or a user put in it."""

from __future__ import annotations

from sparkcap.publish.marts import FleetRow
from sparkcap.publish.text.markdown import capacity_markdown
from tests.support.rows import capacity


def test_the_artifact_uses_the_fleet_line_and_keeps_each_verdict_in_its_cell() -> None:
    hostile = "no valid measurement at level 1: a | b\nc \\ d"
    markdown = capacity_markdown(
        "r1",
        [FleetRow("code", 4, 20.0, "m", None, 1)],
        [
            capacity("≥ 2 streams (all tested levels pass)", first_failing_level=None),
            capacity(hostile, measured=False, deployment="r429", capacity_streams=0),
        ],
    )
    lines = markdown.splitlines()
    assert lines[:3] == [
        "# sparkcap run r1",
        "",
        "- fleet capacity at 20 tok/s — code: 4 streams (replicas extrapolated: m)",
    ]
    rows = [line for line in lines if line.startswith("| glm") or line.startswith("| r429")]
    assert rows[0] == "| glm | code | 4 | 4 | — | no | 6 | ≥ 2 streams (all tested levels pass) |"
    # one row, the same number of cells as the header: the reason's | and line break are text
    assert len(rows) == 2 and rows[1].endswith(
        "| no valid measurement at level 1: a \\| b c \\\\ d |"
    )
    assert rows[1].replace("\\|", "").count("|") == lines[4].count("|")
