"""A link test's answer in words: its state in one word and its line."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkcap.publish.marts import LinkRow


def link_state(healthy: bool, achieved_gbps: float | None) -> str:
    """A link's state in one word, wherever it is shown: ``ok``, ``UNHEALTHY`` (below the
    fleet's share of nominal) or ``FAILED`` (nothing measured)."""
    if healthy:
        return "ok"
    return "FAILED" if achieved_gbps is None or achieved_gbps != achieved_gbps else "UNHEALTHY"


def link_line(k: LinkRow) -> str:
    """A link's achieved against nominal Gb/s and dbt's verdict (:func:`link_state`), with the
    probe's error where it has one."""
    got = "—" if k.achieved_gbps is None else f"{k.achieved_gbps:.2f} Gb/s"
    state = link_state(k.healthy, k.achieved_gbps)
    why = f" ({k.error})" if k.error else ""
    return f"{k.deployment}/{k.link}: {got} of {k.nominal_gbps:g} nominal — {state}{why}"
