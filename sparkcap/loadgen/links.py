"""Link health: run each declared link's probe command and parse the bandwidth it achieved.

The study's four-node ring ran at 12.5–13 Gb/s per link until a reboot restored it, after
which aggregate throughput rose 27 % and prefill throughput doubled. Fleet files may declare
a deployment's links (node pairs, nominal Gb/s) and a command per link — ``iperf3 -J …``,
``ib_write_bw …`` or anything printing the documented plain format — run locally or over ssh.
sparkcap parses the achieved Gb/s and stores it, with the nominal figure and the fleet's
``link_min_share``, in ``raw.link_tests``; whether a link is healthy is dbt's judgement
(``int_link_health``, read from ``marts.fct_link_health``), so every printer of it and every
night already checked agree on one rule.

Plain format: any line ``gbps=<number>`` (e.g. ``echo gbps=$(my-probe)``).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from dataclasses import dataclass

from sparkcap.config.fleet import LinkSpec


class LinkParseError(ValueError):
    pass


def parse_iperf3_json(text: str) -> float:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise LinkParseError("iperf3 output is not JSON (run it with -J)") from exc
    if data.get("error"):
        raise LinkParseError(f"iperf3: {data['error']}")
    end = data.get("end") or {}
    for key in ("sum_received", "sum", "sum_sent"):
        bps = (end.get(key) or {}).get("bits_per_second")
        if isinstance(bps, int | float):
            return float(bps) / 1e9
    raise LinkParseError("iperf3 JSON has no end.sum_received.bits_per_second")


_IB_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


def parse_ib_bw(text: str) -> float:
    """perftest's ib_*_bw table: ``#bytes #iterations BW peak[MB/sec] BW average[MB/sec] …``.

    With ``--report_gbits`` the columns are Gb/s; otherwise MB/s (converted here).
    """
    gbits = "Gb/sec" in text
    rows = [m for m in (_IB_ROW.match(line) for line in text.splitlines()) if m]
    if not rows:
        raise LinkParseError("no ib_*_bw result row found")
    average = float(rows[-1].group(4))
    return average if gbits else average * 8 / 1000


def parse_plain(text: str) -> float:
    m = re.search(r"gbps\s*=\s*([0-9]*\.?[0-9]+)", text)
    if not m:
        raise LinkParseError("no 'gbps=<number>' line")
    return float(m.group(1))


PARSERS = {"iperf3-json": parse_iperf3_json, "ib-bw": parse_ib_bw, "plain": parse_plain}


@dataclass
class LinkResult:
    """What one link's probe measured; ``min_share`` travels with it so the warehouse keeps
    the bar the night was held to, but nothing here holds the link to it."""

    deployment: str
    spec: LinkSpec
    achieved_gbps: float | None
    error: str | None
    min_share: float


def run_link(deployment: str, spec: LinkSpec, min_share: float) -> LinkResult:
    try:
        proc = subprocess.run(
            shlex.split(spec.command),
            capture_output=True,
            text=True,
            timeout=spec.timeout_s,
            check=False,
        )
    except FileNotFoundError as exc:
        return LinkResult(deployment, spec, None, f"command not found: {exc.filename}", min_share)
    except subprocess.TimeoutExpired:
        return LinkResult(
            deployment, spec, None, f"timed out after {spec.timeout_s:g} s", min_share
        )
    try:
        gbps = PARSERS[spec.format](proc.stdout)
    except LinkParseError as exc:
        detail = (proc.stderr or "").strip().splitlines()[-1:] if proc.returncode else []
        msg = f"{exc}" + (f" (exit {proc.returncode}: {detail[0]})" if detail else "")
        return LinkResult(deployment, spec, None, msg[:300], min_share)
    return LinkResult(deployment, spec, gbps, None, min_share)


def run_links(links: dict[str, tuple[list[LinkSpec], float]]) -> list[LinkResult]:
    """Run every link one at a time: they share the network they measure."""
    return [run_link(dep, spec, share) for dep, (specs, share) in links.items() for spec in specs]
