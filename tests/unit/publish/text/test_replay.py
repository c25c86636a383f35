"""An open-loop replay's lines and table: the fleet's verdict, then each deployment, thin
tails hidden."""

from __future__ import annotations

import io

from rich.console import Console

from sparkcap.publish.text.replay import replay_lines, replay_table


def test_a_replay_names_the_fleet_verdict_then_each_deployment_and_hides_thin_tails() -> None:
    from sparkcap.publish.marts import ReplayFleetRow, ReplayRow

    rows = [
        ReplayRow("a", 1.3, 3, 8.0, 300, 0, 14.1, 21, 17.2, 0.7, 0.1, 0.2, 0.19, 280, True,
                  0.41, 2, 4, 3, 0.125, "fails", "fails: code median 17.2 tok/s < 20",
                  17.2, None, 15.9, None, 12.5, "the model is off here: code median 8 %",
                  "rate"),
        ReplayRow("b", 1.3, 3, 16.0, 40, 0, 3.0, 5, 25.0, 0.0, 0.1, 0.9, 0.2, 40, False,
                  0.01, 0, 0, 0, 0.0, "holds",
                  "holds: 3.0 streams in flight on average at 25.0 tok/s"),
    ]  # fmt: skip
    fleet = ReplayFleetRow("0a1b2c3d", 1.3, 3, 2, 1, "a", "fails at a")
    lines = replay_lines("r1", fleet, rows, {"c": "ConnectError: refused"})
    assert lines[0] == (
        "open-loop replay of run r1 at 1.3× the rate plan's arrivals (seed 3): the plan fails"
        " at a (1 of 2 deployments hold)"
    )
    assert lines[0].startswith("open-loop replay of run r1 at 1.3× the rate plan's arrivals")
    assert lines[1:] == [
        "  a: fails: code median 17.2 tok/s < 20",
        "    the model is off here: code median 8 %",
        "  b: holds: 3.0 streams in flight on average at 25.0 tok/s",
        "  c: not replayed: ConnectError: refused",
    ]
    buf = io.StringIO()
    Console(file=buf, width=200).print(replay_table("r1", rows))
    b_line = next(x for x in buf.getvalue().splitlines() if x.split()[:1] == ["b"])
    assert "few (40)" in b_line and "0.90" not in b_line  # 40 TTFTs support no p90
    # measured beside the open-loop model's prediction: streams in flight and the code median
    assert "14.1/12.5" in buf.getvalue() and "17.2/15.9" in buf.getvalue()
    a_line = next(x for x in buf.getvalue().splitlines() if x.split()[:1] == ["a"])
    assert "2 · 0.41" in a_line  # two requests sent late, the worst 0.41 s behind
    # decode below the threshold beside 3 of a's 4 long prefills, 12.5 % of its time; b had none
    assert "12.5% (3/4)" in a_line and b_line.split()[-2:] == ["—", "holds"]
    # every header and cell whole at 80 columns (a cell wraps, never cut with an ellipsis)
    narrow = io.StringIO()
    Console(file=narrow, width=80).print(replay_table("r1", rows))
    assert "…" not in narrow.getvalue() and max(map(len, narrow.getvalue().splitlines())) <= 80
