"""What the command line prints of a built run, read from the marts: it applies no rule of its
own, so what a terminal shows is what the report and SQL users see. Kept out of ``cli.py`` so
the command line only parses, calls and prints."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from rich.console import Console

from sparkcap.publish import text


def print_levels(
    console: Console, stream: TextIO, db: Path, run_id: str, fmt: text.OutputFormat = "table"
) -> None:
    """The run's levels and capacities (build the run first); csv and json go to ``stream``
    in their documented shape, the table's notes after it to ``console``."""
    from sparkcap.publish import marts  # +0.24 s (DuckDB, Arrow)

    levels, caps = marts.levels(db, run_id), marts.capacities(db, run_id)
    text.print_levels(console, stream, run_id, levels, caps, fmt, marts.bottlenecks(db, run_id))
    if fmt == "table":  # csv/json keep their documented shape
        for line in text.session_cache_lines(marts.session_caches(db, run_id)):
            console.print(line, highlight=False)
        for line in text.change_lines(marts.changes(db, run_id)):
            console.print(line, highlight=False)
        for ladder in marts.context_ladders(db, run_id):
            console.print(text.context_ladder_line(ladder), highlight=False)


def print_fleet(console: Console, db: Path, run_id: str) -> None:
    """The fleet's headline: the numbers the report shows."""
    from sparkcap.publish import marts  # +0.24 s (DuckDB, Arrow)

    for f in marts.fleet_capacities(db, run_id):
        console.print(text.fleet_line(f), highlight=False)
    headline = text.rate_plan_headline(marts.plan_rates(db, run_id))
    if headline:
        console.print(headline, highlight=False)


def print_plan(console: Console, db: Path, run_id: str) -> bool:
    """The plan in requests a minute (fct_plan_rates) first, then the burst plan (fct_plan,
    fct_plan_routing) as the study's figure; False when the run has no capacities to plan."""
    from sparkcap.publish import marts  # +0.24 s (DuckDB, Arrow)

    found = marts.plan(db, run_id)
    if found is None:
        return False
    rates = marts.plan_rates(db, run_id)
    for line in text.rate_plan_lines(run_id, found.threshold_tok_s, rates):
        console.print(line, highlight=False)
    console.print(text.rate_plan_table(run_id, rates))
    console.print("the burst plan (the study's figure: synchronized streams)", highlight=False)
    for line in text.plan_lines(found):
        console.print(line, highlight=False)
    console.print(text.plan_table(run_id, marts.plan_routing(db, run_id)))
    return True
