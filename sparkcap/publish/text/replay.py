"""An open-loop replay of a plan: the fleet's verdict and each deployment's in words, and the
measured beside the predicted in a table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Table

from sparkcap.publish.text.tables import figure, narrow_table

if TYPE_CHECKING:
    from sparkcap.publish.marts import ReplayFleetRow, ReplayRow


def replay_lines(
    run_id: str,
    fleet: ReplayFleetRow | None,
    rows: Sequence[ReplayRow],
    failed: dict[str, str],
) -> list[str]:
    """The fleet's verdict under open-loop arrivals first, then each deployment's in words."""
    if fleet is None:
        lines = [f"open-loop replay of run {run_id}: nothing recorded"]
    else:
        kind = next((r.plan_kind for r in rows if r.plan_kind), None)
        plan = {"rate": "the rate plan's", "burst": "the burst plan's"}.get(
            kind or "", "the plan's"
        )
        lines = [
            f"open-loop replay of run {run_id} at {fleet.rate_factor:g}× {plan} arrivals "
            f"(seed {fleet.seed}): the plan {fleet.plan_verdict}"
            f" ({fleet.n_holding} of {fleet.n_deployments} deployments hold)"
        ]
    for r in rows:
        lines.append(f"  {r.deployment}: {r.verdict_text}")
        if r.model_note:
            lines.append(f"    {r.model_note}")
    shown = {r.deployment for r in rows}
    for name, why in sorted(failed.items()):
        if name not in shown:  # its own row says so once staged
            lines.append(f"  {name}: not replayed: {why}")
    return lines


def _prefill_below(r: ReplayRow) -> str:
    """The share of the replay's time decode spent below the threshold beside its long
    prefills (what the plan's prefill budget allows a share of), and of how many prompts."""
    if r.n_long_prefills == 0 or r.prefill_below_threshold_share is None:
        return "—"
    return f"{r.prefill_below_threshold_share:.1%} ({r.n_long_prefills_below}/{r.n_long_prefills})"


def replay_table(run_id: str, rows: Sequence[ReplayRow]) -> Table:
    """Measured beside predicted (the open-loop model's figure for the offer, after the
    slash), the TTFT p90 from the scheduled start (a client that fell behind shows there), the
    requests sent late and the prefill budget's share; readable at 80 columns (a cell wraps,
    never cut). A p90 over too few samples is no figure."""
    table = narrow_table(
        f"replay, run {run_id}: streams in flight and median tok/s, measured/predicted",
        [
            ("deployment", "left"),
            ("flight", "right"),
            ("code", "right"),
            ("prose", "right"),
            ("TTFT90", "right"),
            ("late", "right"),
            ("prefill", "right"),
            ("verdict", "left"),
        ],
    )
    for r in rows:
        if r.verdict == "not replayed":  # nothing was sent: no figure, its reason above
            table.add_row(r.deployment, *["—"] * 6, r.verdict)
            continue
        p90 = (
            figure(r.ttft_scheduled_p90_s, 2)
            if r.ttft_p90_is_supported
            else (f"few ({r.ttft_samples})")
        )
        table.add_row(
            r.deployment,
            _pair(r.mean_streams_in_flight, r.predicted_mean_in_flight),
            _pair(r.code_median_decode_tok_s, r.predicted_code_median_tok_s),
            _pair(r.prose_median_decode_tok_s, r.predicted_prose_median_tok_s),
            p90,
            f"{r.n_sent_late} · {figure(r.max_send_lag_s, 2)}",
            _prefill_below(r),
            r.verdict,
        )
    return table


def _pair(measured: float | None, predicted: float | None) -> str:
    if measured is None and predicted is None:
        return "—"
    return f"{figure(measured)}/{figure(predicted)}"
