"""``sparkcap replay``: the night's plan under open-loop arrivals (kept out of ``cli.py``,
which parses every other command). It parses, calls :mod:`sparkcap.night.replay` and prints
what ``marts.fct_replay`` and ``fct_replay_fleet`` say."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Annotated

import typer

from sparkcap import cli_options as opt
from sparkcap.config.fleet import load_fleet
from sparkcap.publish.text.console import text_console
from sparkcap.publish.text.replay import replay_lines, replay_table
from sparkcap.settings import get_settings

_STALL = re.compile(r"^\s*(?P<s>\d+(?:\.\d+)?)\s*s?\s*@\s*(?P<at>\d+(?:\.\d+)?)\s*s?\s*$")

DurationOption = Annotated[
    float, typer.Option(help="seconds of arrivals to schedule", min=1.0, max=86_400.0)
]
RateFactorOption = Annotated[
    float,
    typer.Option(help="times the plan's arrival rates (1.3: 30 % more users)", min=0.01, max=100),
]
SeedOption = Annotated[int, typer.Option(help="the schedule's seed", min=0, max=2**31 - 1)]
PlanKindOption = Annotated[
    str,
    typer.Option(
        "--plan",
        help="which plan to replay: rate (requests a minute by open-loop capacity) or burst "
        "(the study's streams, at Little's rate)",
    ),
]
SearchOption = Annotated[
    bool,
    typer.Option(
        "--search",
        help="find lambda* by replays: bisect each deployment's rate factor (from 1.0, the "
        "plan), each step a replay of --duration",
    ),
]
StepsOption = Annotated[int, typer.Option(help="replays a --search makes", min=1, max=12)]
StallOption = Annotated[
    str | None,
    typer.Option(help="block the client's loop SECONDS@AT (e.g. 1.5@10): a self-check"),
]


def parse_stall(value: str | None) -> tuple[float, float]:
    if value is None:
        return 0.0, 0.0
    m = _STALL.match(value)
    if m is None:
        raise typer.BadParameter("SECONDS@AT, e.g. 1.5@10", param_hint="--stall")
    return float(m["s"]), float(m["at"])


def replay(
    fleet: opt.NightFleetOption,
    duration: DurationOption = 60.0,
    rate_factor: RateFactorOption = 1.0,
    seed: SeedOption = 1,
    plan: PlanKindOption = "rate",
    mix: opt.MixOption = None,
    long_prompts: opt.LongPromptsOption = None,
    max_below_share: opt.MaxBelowShareOption = None,
    stall: StallOption = None,
    search: SearchOption = False,
    steps: StepsOption = 4,
    run: opt.ExportRunOption = None,
    db: opt.DbOption = None,
) -> None:
    """Replay the plan with open-loop (Poisson) arrivals; dbt says if it holds (fct_replay).

    Exits 0 when the plan holds, 3 when it fails, was not replayed somewhere or gives no
    verdict, 1 when nothing was recorded."""
    from sparkcap.errors import ReplayError
    from sparkcap.night.replay import REPLAY_MODELS, replay_options, run_replays, search_replays
    from sparkcap.publish import marts
    from sparkcap.transform.dbt_build import build
    from sparkcap.transform.plan_vars import build_plan, plan_vars

    out = text_console(soft_wrap=True)
    db_path: Path = db if db is not None else get_settings().db_path
    client_stall = parse_stall(stall)
    if plan not in ("rate", "burst"):
        raise typer.BadParameter("rate or burst", param_hint="--plan")
    the_fleet = load_fleet(fleet)
    # the plan's vars stay with every build after the replays: the predictions read the open-loop
    # model of the plan the offers came from (its long prompts reserved)
    the_vars = plan_vars(mix, long_prompts, max_below_share)
    if run is not None and db_path.is_file():
        marts.run_row(db_path, run)  # a run named that is not there is said so, by name
    build_plan(db_path, the_vars)
    run_id = run or marts.latest_built_run(db_path)
    offers = replay_options(
        marts.replay_plan(db_path, run_id),
        plan_kind=plan,
        duration_s=duration,
        rate_factor=rate_factor,
        seed=seed,
        client_stall=client_stall,
    )
    if search:

        def step_lines(step: int, rows: list[marts.ReplayRow], failed: dict[str, str]) -> None:
            out.print(f"search step {step} of {steps}:", highlight=False)
            for r in rows:
                out.print(f"  {r.deployment} at {r.rate_factor:.3g}×: {r.verdict_text}")
            for name, why in sorted(failed.items()):
                out.print(f"  {name}: not replayed: {why}", highlight=False)

        search_id, brackets = search_replays(
            the_fleet, db_path, run_id, offers, steps, on_step=step_lines, dbt_vars=the_vars
        )
        out.print(f"lambda* by replay, run {run_id} (search {search_id}):", highlight=False)
        for found in marts.replay_search(db_path, run_id, search_id):
            out.print(f"  {found.deployment}: {found.search_text}", highlight=False)
        for name, bracket in sorted(brackets.items()):
            if bracket.stopped:
                out.print(f"  {name}: stopped: {bracket.stopped}", highlight=False)
        return
    try:
        outcome = asyncio.run(run_replays(the_fleet, db_path, run_id, offers))
    except KeyboardInterrupt:
        raise ReplayError(
            "interrupted: each deployment's replay, whole or as far as it got, is spooled; "
            f"`sparkcap stage --db {db_path}` lands it (an interrupted one gets no verdict)"
        ) from None
    build(db_path, select=" ".join(REPLAY_MODELS), dbt_vars=the_vars)
    rows = marts.replays(db_path, run_id, outcome.wave_ids)
    replay_id = next(iter(offers.values())).replay_id or ""
    fleet_verdict = marts.replay_fleet(db_path, run_id, replay_id)
    for line in replay_lines(run_id, fleet_verdict, rows, outcome.failed):
        out.print(line, highlight=False)
    if rows:
        out.print(replay_table(run_id, rows))
    # a script gates on the status: the plan held (0), or it did not (3), or nothing was
    # recorded to judge (1)
    if fleet_verdict is None:
        raise typer.Exit(1)
    if not fleet_verdict.plan_verdict.startswith("holds"):
        raise typer.Exit(opt.PLAN_NOT_HOLDING_EXIT_CODE)
