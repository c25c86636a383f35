"""The Prometheus textfile from typed mart rows, read back with prometheus-client's own parser:
names, labels, values, HELP and TYPE; a pair that measured nothing has no capacity, only
``sparkcap_capacity_measured 0``; a hostile deployment name stays one label value; the file is
replaced whole or not at all, and a bad target is one clear error."""

from __future__ import annotations

import errno
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkcap.errors import ExportFailed
from sparkcap.publish import export
from sparkcap.publish.export import NightReport, render, write_atomically
from sparkcap.publish.marts import (
    CapacityRow,
    ChangeRow,
    EnergyAtCapacityRow,
    FleetRow,
    RunRow,
    TierRow,
)

HOSTILE = 'a"b\\c\nd} x{y="1"'

STARTED = datetime(2026, 12, 2, 1, 0, 0, tzinfo=UTC)
RUN = RunRow("20261202T010000-ab12", STARTED, None, "complete", None, "0.7.0")


def capacity(dep: str, streams: int, *, measured: bool = True, **kw: Any) -> CapacityRow:
    row: dict[str, Any] = {
        "deployment": dep,
        "workload": "code",
        "threshold_tok_s": 20.0,
        "capacity_streams": streams,
        "is_lower_bound": False,
        "is_below_lowest_level": False,
        "first_failing_level": 8,
        "method": "grid",
        "level_capacity_streams": streams,
        "search_low_streams": None,
        "search_high_streams": None,
        "n_straddling_levels": 0,
        "sustain_result": "not run (grid)",
        "is_measured": measured,
        "capacity_verdict": f"{streams} streams",
        "capacity_interpolated_streams": streams,
        "n_valid_trials": 3,
    }
    row.update(kw)
    return CapacityRow(**row)


def change(subject: str, concurrency: int | None, **kw: Any) -> ChangeRow:
    row: dict[str, Any] = {
        "deployment": "glm",
        "workload": "code",
        "subject": subject,
        "concurrency": concurrency,
        "baseline_value": 50.0,
        "baseline_low": 49.0,
        "baseline_high": 51.0,
        "value": 46.0,
        "change_pct": -8.0,
        "p_value": 0.002,
        "is_change": True,
        "direction": "slower",
        "n_baseline_runs": 7,
        "what_else_changed": "engine 0.11.2 → 0.12.0",
        "verdict": "8 % slower",
    }
    row.update(kw)
    return ChangeRow(**row)


NIGHT = NightReport(
    run=RUN,
    capacities=[
        capacity("glm", 6, is_lower_bound=True),
        capacity("r429", 0, measured=False),
        capacity(HOSTILE, 2),
    ],
    fleet=[FleetRow("code", 8, 20.0, None, "r429", 1)],
    tiers=[
        TierRow("glm", "code", 20.0, None, 6, True, True, True),
        TierRow("glm", "code", 10.0, 1.0, 9, False, True, False),
        TierRow("glm", "code", 50.0, 5.0, None, None, False, False),
    ],
    changes=[
        change("level", 4),
        change("capacity", None, change_pct=None, p_value=None, is_change=False, direction=None),
    ],
    energy=[
        EnergyAtCapacityRow("glm", "code", 6, 2.5, 30.0, "measured", None, 28.5, 31.5),
        EnergyAtCapacityRow("r429", "code", None, None, None, "unavailable", "NVML: N/A"),
    ],
)


def parsed(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    family = parsed(text)[name]
    return {tuple(sorted(s.labels.items())): s.value for s in family.samples}


def key(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def test_every_family_is_a_documented_gauge_named_with_its_unit() -> None:
    families = parsed(render(NIGHT))
    assert set(families) == set(export.FAMILIES)
    for name, family in families.items():
        assert name.startswith("sparkcap_")
        assert family.type == "gauge"
        assert family.documentation == export.FAMILIES[name]


def test_capacities_read_back_with_their_labels_and_an_unmeasured_pair_has_none() -> None:
    text = render(NIGHT)
    assert samples(text, "sparkcap_capacity_streams") == {
        key(deployment="glm", workload="code", threshold_tok_s="20"): 6.0,
        key(deployment=HOSTILE, workload="code", threshold_tok_s="20"): 2.0,
    }
    assert samples(text, "sparkcap_capacity_measured") == {
        key(deployment="glm", workload="code"): 1.0,
        key(deployment="r429", workload="code"): 0.0,
        key(deployment=HOSTILE, workload="code"): 1.0,
    }
    lower = samples(text, "sparkcap_capacity_is_lower_bound")
    assert lower[key(deployment="glm", workload="code", threshold_tok_s="20")] == 1.0
    assert samples(text, "sparkcap_fleet_capacity_streams") == {
        key(workload="code", threshold_tok_s="20"): 8.0
    }
    assert samples(text, "sparkcap_run_info") == {key(run_id=RUN.run_id): 1.0}
    assert samples(text, "sparkcap_run_timestamp_seconds") == {(): STARTED.timestamp()}


def test_tiers_name_their_ceiling_and_an_unmeasured_tier_is_left_out() -> None:
    assert samples(render(NIGHT), "sparkcap_capacity_tier_streams") == {
        key(
            deployment="glm", workload="code", threshold_tok_s="20", ttft_p90_ceiling_s="+Inf"
        ): 6.0,
        key(deployment="glm", workload="code", threshold_tok_s="10", ttft_p90_ceiling_s="1"): 9.0,
    }


def test_two_thresholds_seven_digits_alike_are_two_series() -> None:
    """Labels by shortest round-trip digits: 12.3456781 and 12.3456789 under six significant
    digits were one series twice, and node-exporter rejects such a file whole."""
    tiers = [
        TierRow("glm", "code", 12.3456781, None, 6, False, True, False),
        TierRow("glm", "code", 12.3456789, None, 5, False, True, False),
    ]
    night = NightReport(RUN, [], tiers=tiers)
    got = samples(render(night), "sparkcap_capacity_tier_streams")
    labels = sorted(dict(k)["threshold_tok_s"] for k in got)
    assert labels == ["12.3456781", "12.3456789"], got


def test_changes_are_flags_with_their_size_and_p_only_where_the_mart_has_them() -> None:
    text = render(NIGHT)
    level = key(deployment="glm", workload="code", subject="level", concurrency="4")
    cap = key(deployment="glm", workload="code", subject="capacity", concurrency="")
    assert samples(text, "sparkcap_change") == {level: 1.0, cap: 0.0}
    assert samples(text, "sparkcap_change_ratio") == {level: pytest.approx(-0.08)}
    assert samples(text, "sparkcap_change_p_value") == {level: 0.002}


def test_unavailable_energy_is_no_figure_never_zero() -> None:
    text = render(NIGHT)
    glm = key(deployment="glm", workload="code")
    assert samples(text, "sparkcap_energy_measured") == {
        glm: 1.0,
        key(deployment="r429", workload="code"): 0.0,
    }
    assert samples(text, "sparkcap_tokens_per_joule") == {glm: 2.5}
    assert samples(text, "sparkcap_streams_per_kw") == {glm: 30.0}
    # with the range its readings' timing allows, and none for the unavailable one
    assert samples(text, "sparkcap_streams_per_kw_low") == {glm: 28.5}
    assert samples(text, "sparkcap_streams_per_kw_high") == {glm: 31.5}


def test_a_hostile_name_stays_one_label_value_on_one_line() -> None:
    text = render(NIGHT)
    assert all(
        x.startswith(("# HELP sparkcap_", "# TYPE sparkcap_", "sparkcap_"))
        for x in text.splitlines()
    )
    assert 'deployment="a\\"b\\\\c\\nd} x{y=\\"1\\""' in text  # escaped, not raw
    names = {s.labels.get("deployment") for f in parsed(text).values() for s in f.samples}
    assert HOSTILE in names


def test_a_night_before_the_new_marts_exports_its_capacities_alone() -> None:
    old = NightReport(run=RUN, capacities=[capacity("glm", 4)])
    assert set(parsed(render(old))) == {
        "sparkcap_run_info",
        "sparkcap_run_timestamp_seconds",
        "sparkcap_capacity_measured",
        "sparkcap_capacity_streams",
        "sparkcap_capacity_is_lower_bound",
    }


def test_the_file_is_replaced_whole_and_readable_by_the_collector(tmp_path: Path) -> None:
    target = tmp_path / "sparkcap.prom"
    target.write_text("old\n")
    write_atomically(target, render(NIGHT))
    assert target.read_text(encoding="utf-8") == render(NIGHT)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["sparkcap.prom"]  # no temporary file left


def test_a_full_disk_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "sparkcap.prom"
    target.write_text("old\n")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(ExportFailed, match=r"cannot write .*sparkcap.prom: No space left"):
        write_atomically(target, render(NIGHT))
    assert target.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["sparkcap.prom"]


@pytest.mark.parametrize(
    ("name", "words"),
    [
        (".", "it is a directory"),
        ("missing/sparkcap.prom", "no such directory"),
        ("fifo", "not a regular file"),
    ],
)
def test_a_bad_target_is_one_error_naming_it(tmp_path: Path, name: str, words: str) -> None:
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ExportFailed, match=words):
        write_atomically(tmp_path / name, "x\n")
    assert stat.S_ISFIFO((tmp_path / "fifo").stat().st_mode)
