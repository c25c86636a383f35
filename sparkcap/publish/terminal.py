"""What the command line prints of a built night: it renders a :class:`NightReport` and applies
no rule of its own, so what a terminal shows is what the report and SQL users see. Kept out of
``cli.py`` so the command line only parses, calls and prints."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from rich.console import Console

from sparkcap.publish.text import tables
from sparkcap.publish.text.capacity import fleet_line, session_cache_lines
from sparkcap.publish.text.changes import change_lines
from sparkcap.publish.text.context_ladder import context_ladder_line
from sparkcap.publish.text.plan import (
    plan_lines,
    plan_table,
    rate_plan_headline,
    rate_plan_lines,
    rate_plan_table,
)

if TYPE_CHECKING:
    from sparkcap.publish.night import NightReport


def print_levels(
    console: Console, stream: TextIO, night: NightReport, fmt: tables.OutputFormat = "table"
) -> None:
    """The night's levels and capacities; csv and json go to ``stream`` in their documented
    shape, the table's notes after it to ``console``."""
    tables.print_levels(
        console, stream, night.run_id, night.levels, night.capacities, fmt, night.bottlenecks
    )
    if fmt == "table":  # csv/json keep their documented shape
        for line in session_cache_lines(night.session_caches):
            console.print(line, highlight=False)
        for line in change_lines(night.changes):
            console.print(line, highlight=False)
        for ladder in night.context_ladders:
            console.print(context_ladder_line(ladder), highlight=False)


def print_fleet(console: Console, night: NightReport) -> None:
    """The fleet's headline: the numbers the report shows."""
    for f in night.fleet:
        console.print(fleet_line(f), highlight=False)
    headline = rate_plan_headline(night.plan_rates)
    if headline:
        console.print(headline, highlight=False)


def print_plan(console: Console, night: NightReport) -> bool:
    """The plan in requests a minute (fct_plan_rates) first, then the burst plan (fct_plan,
    fct_plan_routing) as the study's figure; False when the run has no capacities to plan."""
    if night.plan is None:
        return False
    for line in rate_plan_lines(night.run_id, night.plan.threshold_tok_s, night.plan_rates):
        console.print(line, highlight=False)
    console.print(rate_plan_table(night.run_id, night.plan_rates))
    console.print("the burst plan (the study's figure: synchronized streams)", highlight=False)
    for line in plan_lines(night.plan):
        console.print(line, highlight=False)
    console.print(plan_table(night.run_id, night.plan_routing))
    return True
