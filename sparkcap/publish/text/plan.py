"""The plan in words and tables: the burst plan (fct_plan, fct_plan_routing), the rate plan in
requests a minute (fct_plan_rates) and each workload's open-loop capacity."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Table

from sparkcap.publish.text.tables import narrow_table

if TYPE_CHECKING:
    from sparkcap.publish.marts import PlanRatesRow, PlanRoutingRow, PlanRow


def _mix_words(code_share: float) -> str:
    """A plan's mix as every plan line says it: "70% code / 30% prose"."""
    return f"{code_share:.0%} code / {1 - code_share:.0%} prose"


def _plan_head(run_id: str, threshold_tok_s: float, code_share: float) -> str:
    """Which plan a line opens: the run's, at the threshold, for the mix."""
    return (
        f"plan for run {run_id} at {threshold_tok_s:g} tok/s per stream, {_mix_words(code_share)}"
    )


def plan_lines(plan: PlanRow) -> list[str]:
    """What fct_plan says, in the order a planner asks: how many, of what, what stops more,
    what is assumed rather than measured, and whether the long prompts fit."""
    if plan.plan_verdict != "planned":
        return [f"plan for run {plan.run_id} ({_mix_words(plan.code_share)}): {plan.plan_verdict}"]
    lines = [
        f"{_plan_head(plan.run_id, plan.threshold_tok_s, plan.code_share)}: "
        f"{plan.planned_streams} concurrent streams ({plan.planned_code_streams} code, "
        f"{plan.planned_prose_streams} prose)",
        f"  headroom: {plan.spare_code_streams} more code or {plan.spare_prose_streams} more "
        "prose streams in all, each alone; limited by: " + (plan.limited_by or "nothing named"),
    ]
    if plan.mixing_contradicted:
        lines.append("  mixing: the mixed probe failed where the plan mixes; see mixed basis")
    elif plan.assumes_additive_mixing:
        lines.append(
            "  mixing: assumed additive (capacity shares add) where the mixed probe did not "
            "measure it"
        )
    if plan.long_prompts_per_min:
        lines.append(
            f"  long prompts: {plan.long_prompts_per_min:g}/min of {plan.long_prompt_tokens} "
            f"tokens, decode below the threshold at most {plan.max_below_threshold_share:.0%} "
            f"of the time: {plan.prefill_verdict}"
        )
        if plan.prefill_not_measured_deployments:
            lines.append(
                "  no prefill budget (not measured, none assumed): "
                + plan.prefill_not_measured_deployments
            )
    return lines


def rate_plan_lines(run_id: str, threshold_tok_s: float, rows: Sequence[PlanRatesRow]) -> list[str]:
    """The plan in the unit a gateway enforces: requests a minute by open-loop capacity
    (fct_plan_rates), the fleet's total and the users it serves at the stated think time."""
    if not rows:
        return [f"rate plan for run {run_id}: not planned (no open-loop capacity)"]
    requests, users = _rate_words(rows)
    lines = [
        f"{_plan_head(run_id, threshold_tok_s, rows[0].code_share)} requests, users arriving "
        "independently:",
        f"  {requests}: {users}",
    ]
    unrouted = [f"{r.deployment} ({r.not_routed_reason})" for r in rows if r.not_routed_reason]
    if unrouted:
        lines.append("  not routed: " + ", ".join(unrouted))
    if any(r.mixes_workloads and (r.mixed_basis or "").startswith("assumed") for r in rows):
        lines.append("  mixing: assumed additive where the mixed probe did not measure it")
    return lines


def rate_plan_headline(rows: Sequence[PlanRatesRow]) -> str | None:
    """The fleet's answer for users who arrive independently, beside the burst figures: the
    rate plan at the night's mix in requests a minute and users (None: no rate plan)."""
    if not rows:
        return None
    requests, users = _rate_words(rows)
    return (
        f"fleet under independent arrivals — {_mix_words(rows[0].code_share)}: {requests}, "
        f"{users} (sparkcap plan)"
    )


def _rate_words(rows: Sequence[PlanRatesRow]) -> tuple[str, str]:
    """The rate plan's fleet total in requests a minute (code and prose), and the users it
    serves at the think time with the long prompts routed beside them."""
    code = sum(r.code_per_min for r in rows)
    prose = sum(r.prose_per_min for r in rows)
    users = sum(r.users for r in rows)
    return (
        f"{code + prose:.0f} requests a minute ({code:.0f} code, {prose:.0f} prose)",
        f"{users:.0f} users at a {rows[0].think_time_s:g} s think time{_long_words(rows)}",
    )


def _long_words(rows: Sequence[PlanRatesRow]) -> str:
    """The long prompts the plan routes beside the requests: their prefills are reserved out
    of each deployment's decode (the open-loop capacity is lower by the time they stall)."""
    long_per_min = sum(r.long_prompts_per_min or 0.0 for r in rows)
    if long_per_min <= 0:
        return ""
    return f", beside {long_per_min:.2g} long prompts a minute (their prefills reserved)"


def rate_plan_table(run_id: str, rows: Sequence[PlanRatesRow]) -> Table:
    """Per deployment: requests a minute routed, its open-loop capacity per replica alone
    (code/prose), the share of its line used, the users, the long prompts; 80 columns."""
    table = narrow_table(
        f"rate plan (requests a minute), run {run_id}",
        [
            ("deployment", "left"),
            ("code", "right"),
            ("prose", "right"),
            ("cap c/p", "right"),
            ("line", "right"),
            ("users", "right"),
            ("long", "right"),
            ("mixing", "left"),
        ],
    )
    for r in rows:
        table.add_row(
            _deployment_cell(r.deployment, r.replicas),
            f"{r.code_per_min:.1f}",
            f"{r.prose_per_min:.1f}",
            f"{_per_min(r.code_capacity_per_min)}/{_per_min(r.prose_capacity_per_min)}",
            f"{r.line_share_used:.0%}",
            f"{r.users:.0f}",
            f"{r.long_prompts_per_min or 0:.2f}",
            _mixing_word(r.mixed_basis) if r.mixes_workloads else "—",
        )
    return table


def _deployment_cell(deployment: str, replicas: int) -> str:
    """A plan table's deployment, with its identical replicas counted ("glm ×2")."""
    return deployment + (f" ×{replicas}" if replicas > 1 else "")


def _per_min(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}"


def plan_table(run_id: str, rows: Sequence[PlanRoutingRow]) -> Table:
    """The burst plan's routing, readable at 80 columns: what limits a replica without the
    "at capacity:" preamble, the mixing basis by its first word (the whole of it is in
    fct_plan_routing and the report)."""
    table = narrow_table(
        f"routing (streams), run {run_id}",
        [
            ("deployment", "left"),
            ("code", "right"),
            ("prose", "right"),
            ("cap c/p", "right"),
            ("used", "right"),
            ("spare", "right"),
            ("budget", "right"),
            ("long", "right"),
            ("limited by", "left"),
            ("mixing", "left"),
        ],
        no_wrap=("deployment", "limited by"),
    )
    for r in rows:
        if r.prefill_budget_is_unbounded:
            budget = "any"
        elif r.prefill_budget_per_min is None:
            budget = "n/m"
        else:
            budget = f"{r.prefill_budget_per_min:.2f}"
        table.add_row(
            _deployment_cell(r.deployment, r.replicas),
            str(r.code_streams),
            str(r.prose_streams),
            f"{r.code_capacity_streams}/{r.prose_capacity_streams}",
            f"{r.capacity_share_used:.0%}",
            f"{r.spare_code_streams}/{r.spare_prose_streams}",
            budget,
            f"{r.long_prompts_per_min:.2f}",
            r.limited_by.removeprefix("at capacity: "),
            _mixing_word(r.mixed_basis),
        )
    return table


def _mixing_word(basis: str | None) -> str:
    """A mixing basis by its first word ("assumed", "measured", "contradicted"); a replica
    with one workload does not mix."""
    if not basis or basis.startswith("one workload"):
        return "—"
    return basis.split(":")[0]
