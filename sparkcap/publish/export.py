"""``sparkcap export --prometheus FILE``: a night's capacities, tiers, changes and energy as
gauges in Prometheus' text exposition format (0.0.4), the format node-exporter's textfile
collector reads, so that the dashboards and alerts a fleet already has see them.

Every value is a mart's, as its typed reader returns it; nothing is judged here. A pair that
measured nothing has no capacity gauge (a 0 would read as "no stream sustained" on a
dashboard), only ``sparkcap_capacity_measured 0``; energy that could not be measured likewise
has no figures, only ``sparkcap_energy_measured 0``. No sample carries a timestamp (the
textfile collector refuses them); the run's start is ``sparkcap_run_timestamp_seconds``. The
file is written whole or not at all: the collector reads whatever ``*.prom`` file it finds
mid-write, so the text goes to a hidden temporary file beside it, renamed over it when whole.
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from sparkcap.errors import ExportFailed
from sparkcap.publish.night import NightReport, read_night


@dataclass
class _Family:
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)


# name → help: every family is a gauge, each name carrying its unit
FAMILIES: dict[str, str] = {
    "sparkcap_run_info": "The run these figures are from (always 1).",
    "sparkcap_run_timestamp_seconds": "When the run started, Unix time in seconds.",
    "sparkcap_capacity_measured": (
        "1 when the deployment and workload has a valid measurement this run, 0 when it "
        "measured nothing (then no capacity is exported for it)."
    ),
    "sparkcap_capacity_streams": (
        "Concurrent streams sustained at the per-stream threshold (the threshold of record)."
    ),
    "sparkcap_capacity_is_lower_bound": (
        "1 when every level tested passed, so the capacity is at least the streams given."
    ),
    "sparkcap_fleet_capacity_streams": "The fleet's concurrent streams for a workload.",
    "sparkcap_capacity_tier_streams": (
        "Concurrent streams sustained at a per-stream threshold and TTFT p90 ceiling "
        '(ttft_p90_ceiling_s="+Inf": no ceiling), from the run\'s stored tokens.'
    ),
    "sparkcap_change": (
        "1 when the run is flagged as changed against its baseline on the subject, else 0."
    ),
    "sparkcap_change_ratio": "The run's value against its baseline, minus 1 (-0.08: 8 % lower).",
    "sparkcap_change_p_value": "The p-value of the test behind sparkcap_change.",
    "sparkcap_energy_measured": (
        "1 when energy at the capacity point was measured, 0 when it was unavailable "
        "(then no energy figure is exported for it)."
    ),
    "sparkcap_tokens_per_joule": "Generated tokens per joule at the capacity point.",
    "sparkcap_streams_per_kw": "Concurrent streams per kilowatt at the capacity point.",
    "sparkcap_streams_per_kw_low": (
        "The lowest streams per kilowatt the power readings' timing allows (each reading is "
        "known to within half its read's round trip); absent where unbounded or not kept."
    ),
    "sparkcap_streams_per_kw_high": "The highest streams per kilowatt the readings' timing allows.",
}


def escape_label_value(value: str) -> str:
    """A label value as the format quotes it: a backslash, a double quote or a line break in
    a deployment's name must neither end the value nor the line."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(int(x)) if float(x).is_integer() and abs(x) < 2**53 else repr(float(x))


def _label_number(x: float | None) -> str:
    """A threshold as a label: ``20`` (never ``20.0``, so a dashboard's selector matches what
    the CLI prints), any other value by its shortest round-trip digits (two thresholds are two
    label values, never one rounded twice: a textfile naming one series twice is rejected
    whole); ``None`` (no ceiling) is ``+Inf``, as Prometheus' own ``le`` spells it."""
    if x is None:
        return "+Inf"
    return _number(x)


def render(night: NightReport) -> str:
    """The textfile's content: one ``# HELP``/``# TYPE`` pair per family that has a sample,
    then its samples, the families in :data:`FAMILIES`' order."""
    families = {name: _Family(help) for name, help in FAMILIES.items()}

    def add(name: str, value: float | None, **labels: str) -> None:
        if value is not None:
            families[name].samples.append((labels, float(value)))

    add("sparkcap_run_info", 1, run_id=night.run.run_id)
    add("sparkcap_run_timestamp_seconds", night.run.started_at.timestamp())
    for c in night.capacities:
        pair = {"deployment": c.deployment, "workload": c.workload}
        add("sparkcap_capacity_measured", 1 if c.is_measured else 0, **pair)
        if c.is_measured:
            at = {**pair, "threshold_tok_s": _label_number(c.threshold_tok_s)}
            add("sparkcap_capacity_streams", c.capacity_streams, **at)
            add("sparkcap_capacity_is_lower_bound", 1 if c.is_lower_bound else 0, **at)
    for f in night.fleet:
        if f.n_measured_deployments == 0:
            continue  # no deployment measured it: a 0 would read as a fleet too slow
        at = {"workload": f.workload, "threshold_tok_s": _label_number(f.threshold_tok_s)}
        add("sparkcap_fleet_capacity_streams", f.capacity_streams, **at)
    for t in night.tiers:
        if t.is_measured and t.capacity_streams is not None:
            add(
                "sparkcap_capacity_tier_streams",
                t.capacity_streams,
                deployment=t.deployment,
                workload=t.workload,
                threshold_tok_s=_label_number(t.threshold_tok_s),
                ttft_p90_ceiling_s=_label_number(t.ttft_p90_ceiling_s),
            )
    for ch in night.changes:
        on = {
            "deployment": ch.deployment,
            "workload": ch.workload,
            "subject": ch.subject,
            "concurrency": "" if ch.concurrency is None else str(ch.concurrency),
        }
        add("sparkcap_change", 1 if ch.is_change else 0, **on)
        add("sparkcap_change_ratio", None if ch.change_pct is None else ch.change_pct / 100, **on)
        add("sparkcap_change_p_value", ch.p_value, **on)
    for e in night.energy:
        pair = {"deployment": e.deployment, "workload": e.workload}
        measured = e.status == "measured"
        add("sparkcap_energy_measured", 1 if measured else 0, **pair)
        if measured:
            add("sparkcap_tokens_per_joule", e.tokens_per_joule, **pair)
            add("sparkcap_streams_per_kw", e.streams_per_kw, **pair)
            add("sparkcap_streams_per_kw_low", e.streams_per_kw_low, **pair)
            add("sparkcap_streams_per_kw_high", e.streams_per_kw_high, **pair)
    return "".join(_family_text(name, fam) for name, fam in families.items() if fam.samples)


def _family_text(name: str, family: _Family) -> str:
    lines = [f"# HELP {name} {family.help}", f"# TYPE {name} gauge"]
    for labels, value in family.samples:
        inside = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels.items())
        lines.append(
            f"{name}{{{inside}}} {_number(value)}" if inside else f"{name} {_number(value)}"
        )
    return "\n".join(lines) + "\n"


def write_atomically(path: Path, content: str) -> None:
    """``content`` as ``path``, whole: written and synced to a hidden temporary file in the
    same folder (not ``*.prom``, so the collector skips it), then renamed over ``path``. The
    file is readable by all (0644: the collector runs as another user; no secret is in it)."""
    if path.is_dir():
        raise ExportFailed(f"cannot write {path}: it is a directory")
    if path.exists() and not stat.S_ISREG(path.stat().st_mode):
        raise ExportFailed(f"cannot write {path}: not a regular file")
    folder = path.parent
    if not folder.is_dir():
        raise ExportFailed(f"cannot write {path}: no such directory {folder}")
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise ExportFailed(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def export_prometheus(db_path: Path, path: Path, run_id: str | None = None) -> NightReport:
    """Write the run's textfile to ``path``; returns what it holds."""
    night = read_night(db_path, run_id)
    write_atomically(path, render(night))
    return night
