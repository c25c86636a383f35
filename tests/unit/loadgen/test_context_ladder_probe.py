"""The context ladder's plan: which rungs it climbs, which context it trusts (a slot's, not the
model's training context), how it names them for dbt, and how the CLI's flags reach it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import ValidationError

from sparkcap.config.command_line import probe_flags
from sparkcap.config.deployment import Deployment
from sparkcap.config.fleet import FleetDeployment
from sparkcap.config.probes import ContextLadderOptions, probe_options
from sparkcap.loadgen import probes
from sparkcap.loadgen.discover import FactRow
from sparkcap.loadgen.probes import ladder_label, ladder_rungs, served_context
from tests.support.probes import probe_cli_flags


def test_rungs_double_from_the_start_to_the_context_less_room_for_the_answer() -> None:
    options = ContextLadderOptions()  # 1024, doubling, 32-token answers
    # 8192 less the answer, 64 for template and question, 2 % for the sizing tolerance
    assert ladder_rungs(options, 8192) == [1024, 2048, 4096, 8192 - 32 - 64 - 163]
    assert ladder_rungs(options, 2048) == [1024, 2048 - 32 - 64 - 40]
    # the context itself below the first rung: one rung, at the top
    assert ladder_rungs(options, 1100) == [1100 - 32 - 64 - 22]
    # no room at all (a server claiming 40 tokens): the first rung, for the server to refuse
    assert ladder_rungs(options, 40) == [1024]
    # a claim past what any ladder builds stops there
    assert ladder_rungs(options, 1 << 24)[-1] == (1 << 20) - 32 - 64 - int((1 << 20) * 0.02)
    stepped = ContextLadderOptions(start_tokens=1000, step_tokens=3000, answer_tokens=16)
    assert ladder_rungs(stepped, 8192) == [1000, 4000, 7000, 8192 - 16 - 64 - 163]
    # nothing known: doubling until the server refuses, never past the hard top
    unbounded = ladder_rungs(options, None)
    assert unbounded[:3] == [1024, 2048, 4096] and unbounded[-1] == probes.LADDER_UNBOUNDED_TOP
    assert ladder_rungs(ContextLadderOptions(step_factor=1.5, start_tokens=1000), 4000) == [
        1000,
        1500,
        2250,
        3375,
        4000 - 32 - 64 - 80,
    ]


def test_the_label_carries_the_context_and_its_source() -> None:
    assert ladder_label(8192, "llama-props") == "ctx0008192-llama-props"
    assert ladder_label(None, "none") == "ctx-none"


def _deployment(**facts: Any) -> Deployment:
    return Deployment(name="d", endpoint="http://127.0.0.1:9/v1", model="m", facts=facts)


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        # a slot's n_ctx is what one prompt may fill; n_ctx_train is the model's, not the server's
        (
            [
                FactRow("context_tokens", 32768.0, "llama-models-meta"),
                FactRow("context_tokens", 8192.0, "llama-props"),
            ],
            (8192, "llama-props"),
        ),
        ([FactRow("context_tokens", 4096.0, "vllm-models")], (4096, "vllm-models")),
        ([FactRow("context_tokens", 32768.0, "llama-models-meta")], (None, "none")),
        ([FactRow("discovery", None, "llama-props", "GET /props: HTTP 500")], (None, "none")),
    ],
)
def test_the_served_context_is_a_slots_or_vllms_and_never_the_training_context(
    monkeypatch: pytest.MonkeyPatch, rows: list[FactRow], expected: tuple[int | None, str]
) -> None:
    async def discovered(dep: Deployment, **_: Any) -> list[FactRow]:
        return rows

    monkeypatch.setattr(probes, "discover_facts", discovered)
    assert asyncio.run(served_context(_deployment())) == expected
    # a declared context wins and the server is not asked
    assert asyncio.run(served_context(_deployment(context_tokens=2048))) == (2048, "declared")


def test_the_cli_flags_and_a_fleet_file_give_the_same_options() -> None:
    # unset --background-streams/--background-tokens are the ladder's own defaults (2, 128),
    # not prefill-interference's (4, 400)
    assert probe_flags("context-ladder", **probe_cli_flags()) == ContextLadderOptions()
    assert probe_flags("prefill-interference", **probe_cli_flags()) == probe_options(
        "prefill-interference", long_prompt_tokens=4000
    )
    by_flags = probe_flags(
        "context-ladder",
        **probe_cli_flags(
            background_streams=3,
            background_tokens=256,
            max_tokens=16,
            start_tokens=512,
            context_tokens=4096,
        ),
    )
    assert by_flags == ContextLadderOptions(
        background_streams=3,
        background_tokens=256,
        answer_tokens=16,
        start_tokens=512,
        context_tokens=4096,
    )
    d = FleetDeployment.model_validate(
        {
            "name": "d",
            "endpoint": "http://127.0.0.1:9/v1",
            "model": "m",
            "probes": {"context-ladder": {"kind": "context-ladder", "start_tokens": 2048}},
        }
    )
    chosen = d.probes["context-ladder"]
    assert isinstance(chosen, ContextLadderOptions) and chosen.start_tokens == 2048
    for bad in ({"step_factor": 1.0}, {"start_tokens": 8}, {"background_streams": 0}):
        with pytest.raises(ValidationError):
            probe_options("context-ladder", **bad)
