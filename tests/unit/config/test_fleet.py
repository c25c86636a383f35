"""A fleet file is parsed within bounds before it is validated: one `error:` line, with the file
and line, for what YAML would follow without end or accept silently."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest

from sparkcap.config.fleet import load_fleet
from sparkcap.errors import FleetError
from sparkcap.night.schedule import prefect_yaml
from tests.support.fleets import fleet_load_error

pytestmark = pytest.mark.reliability

FLEET = (
    "name: x\n"
    "workloads: {code: {}}\n"
    "deployments:\n"
    "  - {name: a, model: m, endpoint: 'http://127.0.0.1:9/v1'}\n"
)
# billion laughs, cut to 6 levels of 9 aliases (387 bytes, 9**6 nodes expanded) so that the
# parser it was written against survives it: 1.8 s and 80 MB there (2.2 GB for 506 bytes)
BOMB = "".join(
    f"{n}: &{n} [" + ", ".join([f"*{p}"] * 9 if p else ['"lol"'] * 9) + "]\n"
    for p, n in zip([None, *"abcde"], "abcdef", strict=True)
)


def _refused(tmp_path: Path, body: str | bytes) -> tuple[str, float, int]:
    """The one-line refusal, the CPU seconds it took and the traced memory it peaked at
    (bytes). CPU time, not wall time: beside a CPU burner and the parallel suite a refusal
    that costs ~0.2 s of CPU can take 2.5 s on the wall clock."""
    f = tmp_path / "fleet.yaml"
    f.write_bytes(body if isinstance(body, bytes) else body.encode())
    tracemalloc.start()
    t0 = time.process_time()
    try:
        with pytest.raises(FleetError) as err:
            load_fleet(f)
        elapsed = time.process_time() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    text = str(err.value)
    assert text.startswith(f"{f}:") and "\n" not in text
    return text, elapsed, peak


def test_an_alias_bomb_is_refused_in_bounded_time_and_memory(tmp_path: Path) -> None:
    """506 bytes took 23 s and 2.2 GB before "unknown key": refused within 2 CPU-s and 32 MB
    (the memory proves nothing was expanded; the time, that nothing was walked for long),
    while an anchor shared by two workloads still loads."""
    text, elapsed, peak = _refused(tmp_path, BOMB + FLEET)
    assert elapsed < 2.0 and peak < 32 << 20, (elapsed, peak)
    assert "expands to more than" in text
    shared = tmp_path / "shared.yaml"
    shared.write_text(FLEET.replace("{code: {}}", "{code: &plan {levels: [1, 2]}, prose: *plan}"))
    assert {k: v.levels for k, v in load_fleet(shared).workloads.items()} == {
        "code": (1, 2),
        "prose": (1, 2),
    }


@pytest.mark.parametrize(
    "body",
    ["name: &n [*n]\n" + FLEET.split("\n", 1)[1], FLEET + "distributed: &d {<<: *d}\n"],
    ids=["alias-in-itself", "merge-of-itself"],
)
def test_a_self_referencing_alias_is_one_error_line(tmp_path: Path, body: str) -> None:
    text, elapsed, _ = _refused(tmp_path, body)
    assert "alias refers to a node that contains it" in text and elapsed < 2.0


def test_a_fleet_file_that_is_not_utf8_is_one_error_line_with_its_line(tmp_path: Path) -> None:
    text, _, _ = _refused(tmp_path, FLEET.encode() + b"description: caf\xe9\n")
    assert ":5: not UTF-8 text (byte 0xe9" in text


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (FLEET + "name: y\n", ":5: name: duplicate key (first given at line 1)"),
        (
            FLEET.replace("{code: {}}", "{code: {trials: 1, trials: 2}}"),
            ":2: workloads.code.trials: duplicate key (first given at line 2)",
        ),
    ],
    ids=["top-level", "nested"],
)
def test_duplicate_keys_are_refused_not_overwritten(tmp_path: Path, body: str, needle: str) -> None:
    text, _, _ = _refused(tmp_path, body)
    assert needle in text


@pytest.mark.parametrize(
    ("schedule", "needle"),
    [
        (("61 2 * * *", "UTC"), ':6: schedule.cron: Invalid cron string: "61 2 * * *"'),
        (("0 2 * * *", "Mars/Olympus"), ":7: schedule.timezone: unknown time zone"),
    ],
    ids=["cron", "timezone"],
)
def test_an_invalid_cron_or_time_zone_is_refused_not_written_to_prefect_yaml(
    tmp_path: Path, schedule: tuple[str, str], needle: str
) -> None:
    f = tmp_path / "fleets" / "x.yaml"
    f.parent.mkdir()
    f.write_text(FLEET + f"schedule:\n  cron: '{schedule[0]}'\n  timezone: {schedule[1]}\n")
    with pytest.raises(FleetError) as err:
        prefect_yaml([f], tmp_path)
    assert str(err.value).startswith(f"{f}:") and needle in str(err.value), str(err.value)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("name: x\nwhen: 2001-13-45\n", "invalid YAML value"),
        ('name: x\nthreshold_tok_s: !!int "0x"\n', "invalid YAML value"),
        ("name: x\nthreshold_tok_s: .inf\n", "threshold_tok_s"),
        ("name: x\nschedule: {cron: '0 2 * * *', timezone: Europe}\n", "unknown time zone"),
        ("name: x\nschedule: {cron: '0 2 * * *', timezone: " + "A" * 5000 + "}\n", "time zone"),
    ],
    ids=["bad-date", "bad-int", "infinite-threshold", "zone-folder", "zone-too-long"],
)
def test_a_value_its_type_cannot_hold_is_one_error_line(
    tmp_path: Path, text: str, needle: str
) -> None:
    message = fleet_load_error(tmp_path / "fleet.yaml", text)
    assert needle in message and "\n" not in message, message[:300]


@pytest.mark.parametrize(
    ("buckets", "needle"),
    [("[1, 8, 4]", "ascending"), ("[true, 2]", "whole batch sizes"), ("[0, 2]", "ascending")],
)
def test_batch_buckets_are_ascending_whole_batch_sizes(
    tmp_path: Path, buckets: str, needle: str
) -> None:
    """A deployment's declared capture sizes steer the search's dip check: a bucket list out
    of order, a YAML `true` (it would pass as 1) or a zero is refused in one line."""
    path = tmp_path / "fleet.yaml"
    body = (
        "name: f\nworkloads: {code: {levels: [1, 2]}}\ndeployments:\n"
        "  - {name: a, model: m, endpoint: 'http://127.0.0.1:9/v1', batch_buckets: %s}\n"
    )
    assert needle in fleet_load_error(path, body % buckets)
    path.write_text(body % "[1, 2, 4, 8]")
    (dep,) = load_fleet(path).deployments
    assert dep.batch_buckets == (1, 2, 4, 8)


def test_a_launch_records_only_the_slots_it_applies(tmp_path: Path) -> None:
    """A slot count is a fact only where the launch gives it to the server: llama-server's
    -np (the default 4 too); the simulator admits what its profile says, so a sim launch
    records none and refuses a slot count it would not apply."""
    f = tmp_path / "fleet.yaml"
    f.write_text(
        "name: x\nworkloads: {code: {}}\ndeployments:\n"
        "  - {name: a, model: m, launch: {kind: llama-server}}\n"
        "  - {name: b, model: m, launch: {kind: llama-server, slots: 2}}\n"
        "  - {name: c, model: m, launch: {kind: sim}}\n"
        "  - {name: d, model: m, parallel_slots: 6, launch: {kind: sim}}\n"
    )
    deps = {d.name: d.resolve("http://127.0.0.1:1/v1") for d in load_fleet(f).deployments}
    assert {n: d.parallel_slots for n, d in deps.items()} == {"a": 4, "b": 2, "c": None, "d": 6}
    refused = fleet_load_error(
        f,
        "name: x\nworkloads: {code: {}}\ndeployments:\n"
        "  - {name: c, model: m, launch: {kind: sim, slots: 4}}\n",
    )
    assert "slots applies to llama-server" in refused, refused
