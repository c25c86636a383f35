"""A profile shapes every plan of the fleet, an agent session's turns included."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkcap.night import plan as night_plan

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("profile", "turns", "answer_tokens", "think_s"),
    [("full", 3, 48, 0.5), ("demo", 3, 48, 0.5), ("smoke", 2, 8, 0.2)],
)
def test_a_profile_caps_the_sessions_turns_as_it_caps_the_streams_outputs(
    profile: str, turns: int, answer_tokens: int, think_s: float
) -> None:
    fleet = night_plan.fleet_for(ROOT / "fleets" / "agent-local.yaml", profile)
    shape = fleet.workloads["agent"].sessions
    assert (shape.turns, shape.answer_tokens, shape.think_s) == (turns, answer_tokens, think_s)
    # what the profile does not cap is the fleet file's
    assert (shape.system_tokens, shape.repo_context_tokens) == (300, 600)


def test_the_demo_caps_a_longer_answer_at_its_own_output_length(tmp_path: Path) -> None:
    text = (ROOT / "fleets" / "agent-local.yaml").read_text(encoding="utf-8")
    path = tmp_path / "f.yaml"
    path.write_text(text.replace("answer_tokens: 48", "answer_tokens: 500"), encoding="utf-8")
    assert night_plan.fleet_for(path).workloads["agent"].sessions.answer_tokens == 500
    demo = night_plan.fleet_for(path, "demo").workloads["agent"].sessions
    assert demo.answer_tokens == night_plan.PROFILES["demo"]["max_tokens"] == 64


def test_a_profile_leaves_the_unread_session_shape_of_stream_plans_alone() -> None:
    fleet = night_plan.fleet_for(ROOT / "fleets" / "twin.yaml", "smoke")
    assert all(p.sessions.turns == 4 for p in fleet.workloads.values())
