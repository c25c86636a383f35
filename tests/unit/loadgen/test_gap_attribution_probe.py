"""The gap-attribution probe's waves: each variant changes exactly one factor of the code-prose
difference, and a fleet file turns the probe on with options validated like the others'."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from sparkcap.config.command_line import probe_flags
from sparkcap.config.deployment import Deployment
from sparkcap.config.fleet import FleetDeployment
from sparkcap.config.probes import GapAttributionOptions, probe_options
from sparkcap.loadgen import probes
from sparkcap.loadgen.probes import GAP_VARIANTS, gap_variant_streams
from sparkcap.loadgen.records import WaveRecord
from sparkcap.loadgen.workloads import StreamSpec, build_streams
from tests.support.probes import probe_cli_flags


def _facts(specs: list[StreamSpec]) -> tuple[str, set[float], list[int]]:
    return (
        specs[0].prompt_id.split("-")[0],
        {s.temperature for s in specs},
        [s.max_tokens for s in specs],
    )


def test_each_variant_changes_one_factor_only() -> None:
    code = _facts(build_streams("code", 4, "t"))
    prose = _facts(build_streams("prose", 4, "t"))
    assert code == ("code", {0.0}, [1000] * 4)
    assert prose == ("prose", {0.7}, [300, 320, 340, 360])
    got = {v[0]: _facts(gap_variant_streams(v[0], 4, "t")) for v in GAP_VARIANTS}
    assert got["code"] == code and got["prose"] == prose
    assert got["code@prose-temperature"] == ("code", prose[1], code[2])
    assert got["code@prose-length"] == ("code", code[1], prose[2])
    assert got["prose@code-temperature"] == ("prose", code[1], prose[2])
    # the variant changes the request, never the prompt: same texts as the workload's own
    assert [s.messages for s in gap_variant_streams("code@prose-length", 4, "t")] == [
        s.messages for s in build_streams("code", 4, "t")
    ]


def test_a_shortened_probe_keeps_the_length_ratio() -> None:
    """A flat cap would give code and prose one length and hide the length factor."""
    assert [s.max_tokens for s in gap_variant_streams("code", 3, "t", max_tokens=100)] == [100] * 3
    assert [s.max_tokens for s in gap_variant_streams("prose", 3, "t", max_tokens=100)] == [
        30,
        32,
        34,
    ]
    assert {s.max_tokens for s in gap_variant_streams("prose", 3, "t", max_tokens=2)} == {2}


def test_one_warm_up_then_every_variant_each_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str, int, int, str]] = []

    async def fake(
        dep: Deployment,
        run_id: str,
        probe: str,
        workload: str,
        specs: list[StreamSpec],
        label: str,
        trial: int,
    ) -> WaveRecord:
        calls.append((probe, workload, len(specs), trial, label))
        # the wave tag is in the prompt: it must not carry a variant's workload words
        assert all("code" not in s.messages[1]["content"].split("]")[0] for s in specs)
        return WaveRecord(
            wave_id=label,
            run_id=run_id,
            deployment=dep.name,
            model=dep.model,
            endpoint=str(dep.endpoint),
            workload=workload,
            concurrency=len(specs),
            trial=trial,
            started_at_ns=0,
            anchor_perf_ns=0,
        )

    monkeypatch.setattr(probes, "_synchronized", fake)
    dep = Deployment(name="d", endpoint="http://127.0.0.1:9/v1", model="m")
    options = GapAttributionOptions(concurrency=3, trials=2)
    waves = asyncio.run(probes.PROBES["gap-attribution"](dep, "run-abcdef", options))
    assert len(waves) == 11
    assert calls[0] == ("gap-attribution", "code", 3, 0, "code")
    names = [v[0] for v in GAP_VARIANTS]
    for trial in (1, 2):
        assert [c[4] for c in calls if c[3] == trial] == names
    assert {(c[4], c[1]) for c in calls} == {
        ("code", "code"),
        ("prose", "prose"),
        ("code@prose-temperature", "code"),
        ("code@prose-length", "code"),
        ("prose@code-temperature", "prose"),
    }


def test_fleet_files_and_flags_turn_the_probe_on() -> None:
    d = FleetDeployment.model_validate(
        {
            "name": "a",
            "model": "m",
            "endpoint": "http://127.0.0.1:9/v1",
            "probes": {"gap-attribution": {"concurrency": 6, "max_tokens": 200}},
        }
    )
    chosen = d.probes["gap-attribution"]
    assert isinstance(chosen, GapAttributionOptions)
    assert (chosen.concurrency, chosen.trials, chosen.max_tokens) == (6, 3, 200)
    defaults = probe_options("gap-attribution")
    assert isinstance(defaults, GapAttributionOptions) and defaults.concurrency == 4
    flags = probe_cli_flags(background_streams=4, background_tokens=400, concurrency=8, trials=2)
    by_flags = probe_flags("gap-attribution", **flags)
    assert by_flags == GapAttributionOptions(concurrency=8, trials=2)
    for bad in ({"trials": 0}, {"max_tokens": 1}, {"concurrency": 0}, {"code_share": 0.5}):
        with pytest.raises(ValidationError):
            probe_options("gap-attribution", **bad)
