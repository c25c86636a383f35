"""An open-loop replay of a night's plan (``sparkcap replay``): every planned deployment at
once, as a fleet receives its users, each at the rates dbt derived from the plan
(``marts.fct_replay_plan``), recorded into the night's own run and judged by dbt
(``marts.fct_replay``, ``fct_replay_fleet``).

A deployment whose replay fails to run costs that deployment only: its failure is a
``raw.step_outcomes`` row (step ``replay``) and the others' waves are kept.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkcap.config.base import MAX_TOKENS
from sparkcap.config.fleet import Fleet
from sparkcap.config.probes import ReplayOptions
from sparkcap.errors import ReplayError, SparkcapError
from sparkcap.loadgen.records import WaveRecord
from sparkcap.loadgen.replay import not_replayed, replay
from sparkcap.night.sweeps import preflight
from sparkcap.publish import marts
from sparkcap.publish.marts import ReplayPlanRow, ReplayRow
from sparkcap.servers.llama import launched
from sparkcap.store import spool
from sparkcap.store.runs import record_step_to
from sparkcap.transform.dbt_build import build

REPLAY_MODELS = ("+fct_replay", "+fct_replay_fleet", "+fct_replay_concurrency")
SEARCH_MODELS = (*REPLAY_MODELS, "fct_replay_search")
# a search widens by this factor until a replay brackets lambda*, then halves the bracket
SEARCH_WIDEN = 1.25


@dataclass
class ReplayOutcome:
    waves: list[WaveRecord] = field(default_factory=list)  # the replays that ran
    failed: dict[str, str] = field(default_factory=dict)  # deployment -> why it did not run
    unreplayed: list[WaveRecord] = field(default_factory=list)  # their waves, no requests

    @property
    def wave_ids(self) -> list[str]:
        """Every wave this replay staged: those that ran and those that say why not."""
        return [w.wave_id for w in (*self.waves, *self.unreplayed)]


PLAN_KINDS = ("rate", "burst")
# the most requests one replay schedules: each is held, with its token times, until the wave
# is spooled, so the schedule's size is the client's memory (about 2 KB a request)
MAX_REPLAY_REQUESTS = 200_000


def replay_options(
    rows: list[ReplayPlanRow],
    *,
    plan_kind: str = "rate",
    duration_s: float,
    rate_factor: float,
    seed: int,
    client_stall: tuple[float, float] = (0.0, 0.0),
    replay_id: str | None = None,
) -> dict[str, ReplayOptions]:
    """The plan's rows as each deployment's replay; a deployment the plan gives nothing (or no
    measured duration) is left out. ``plan_kind`` picks the rates: the rate plan's requests a
    second by open-loop capacity (``rate``), or the burst plan's streams by Little's law
    (``burst``). The rates are dbt's; only the factor is applied (by the replay itself, so
    the offer stored is the plan's and the factor beside it). Each stream asks for the
    max_tokens of the streams the curve and W were measured on, never the fleet file's: both
    hold only for the streams they measured."""
    if plan_kind not in PLAN_KINDS:
        raise ReplayError(f"--plan {plan_kind!r}: choose rate or burst")
    by_dep: dict[str, dict[str, ReplayPlanRow]] = {}
    for r in rows:
        by_dep.setdefault(r.deployment, {})[r.workload] = r
    out: dict[str, ReplayOptions] = {}
    stall_s, stall_at_s = client_stall
    replay_id = replay_id or secrets.token_hex(4)  # one verdict for this replay's deployments
    for dep, w in by_dep.items():
        code, prose = w.get("code"), w.get("prose")
        code_rate, prose_rate = (_rate(r, plan_kind) for r in (code, prose))
        if code_rate <= 0 and prose_rate <= 0:
            continue
        out[dep] = ReplayOptions(
            duration_s=duration_s,
            seed=seed,
            rate_factor=rate_factor,
            planned_streams=sum(_planned(r, plan_kind) for r in (code, prose) if r is not None),
            code_per_s=code_rate,
            prose_per_s=prose_rate,
            long_per_min=(code.long_prompts_per_min or 0.0) if code else 0.0,
            long_prompt_tokens=(code.long_prompt_tokens or 32_000) if code else 32_000,
            code_tokens=_measured_tokens(code),
            prose_tokens=_measured_tokens(prose),
            client_stall_s=stall_s,
            client_stall_at_s=stall_at_s,
            replay_id=replay_id,
            plan_kind=plan_kind,
            max_below_threshold_share=next(
                (r.max_below_threshold_share for r in (code, prose) if r is not None), None
            ),
        )
    if not out:
        raise ReplayError("the plan sends no streams anywhere with a measured stream duration")
    expected = sum(
        (o.code_per_s + o.prose_per_s + o.long_per_min / 60) * rate_factor * duration_s
        for o in out.values()
    )
    if expected > MAX_REPLAY_REQUESTS:
        raise ReplayError(
            f"this replay would send about {expected:,.0f} requests (the plan's rates × "
            f"{rate_factor:g} × {duration_s:g} s), more than the {MAX_REPLAY_REQUESTS:,} one "
            "replay holds: shorten --duration or lower --rate-factor"
        )
    return out


@dataclass
class Bracket:
    """One deployment's search for lambda* by replay: the factors (times the plan's rates)
    that held and failed so far, the next to try, and why it stopped (None: searching)."""

    factor: float = 1.0
    holds: float | None = None  # the largest factor that held below every failure
    fails: float | None = None  # the smallest factor that failed
    stopped: str | None = None

    def record(self, verdict: str) -> None:
        """The step's verdict moves the bracket: a holding factor raises its floor, a failing
        one lowers its ceiling; the next factor is the bracket's midpoint once both ends are
        known, else SEARCH_WIDEN beyond the known end. A step that decides nothing (too
        short, no verdict, nothing measured) stops the search here: a longer replay would
        decide, a repeat of this one would not."""
        if verdict == "holds":
            self.holds = self.factor
        elif verdict == "fails":
            self.fails = self.factor
        else:
            self.stopped = f"{verdict} at {self.factor:g}x"
            return
        if self.holds is not None and self.fails is not None:
            self.factor = (self.holds + self.fails) / 2
        elif self.holds is not None:
            self.factor = self.holds * SEARCH_WIDEN
        else:
            assert self.fails is not None
            self.factor = self.fails / SEARCH_WIDEN


def _rate(row: ReplayPlanRow | None, plan_kind: str) -> float:
    if row is None:
        return 0.0
    rate = row.rate_arrivals_per_s if plan_kind == "rate" else row.arrivals_per_s
    return rate or 0.0


def _planned(row: ReplayPlanRow, plan_kind: str) -> float:
    return (row.rate_planned_streams or 0.0) if plan_kind == "rate" else row.planned_streams


def _measured_tokens(row: ReplayPlanRow | None) -> int | None:
    """The measured streams' max_tokens, where the warehouse holds a length a request can
    ask for (else the workload's own length; each request records what it asked for)."""
    tokens = row.stream_requested_tokens if row is not None else None
    return tokens if tokens is not None and 2 <= tokens <= MAX_TOKENS else None


async def run_replays(
    fleet: Fleet, db_path: Path, run_id: str, offers: dict[str, ReplayOptions]
) -> ReplayOutcome:
    """Every planned deployment's replay at once. Each wave is spooled as its replay ends, so
    a later failure, an interrupt or a busy warehouse keeps it (``sparkcap stage`` lands it);
    a planned deployment whose replay cannot run is spooled as a wave with no requests that
    says why (its verdict: not replayed), so the fleet's verdict never holds without it. The
    offers must all be in ``fleet`` (:func:`require_planned`)."""
    require_planned(fleet, offers)
    outcome = ReplayOutcome()
    deployments = {d.name: d for d in fleet.deployments if d.name in offers}
    with launched(fleet) as endpoints:

        def keep(wave: WaveRecord) -> None:  # an interrupted replay: what it sent
            spool.write_wave(wave, db_path)

        async def one(name: str) -> WaveRecord:
            dep = deployments[name].resolve(endpoints.get(name))
            await preflight(dep)
            wave = await replay(dep, run_id, offers[name], on_interrupt=keep)
            spool.write_wave(wave, db_path)
            return wave

        names = sorted(deployments)
        results = await asyncio.gather(*(one(n) for n in names), return_exceptions=True)
    for name, result in zip(names, results, strict=True):
        if isinstance(result, BaseException):
            if not isinstance(result, Exception):
                raise result
            outcome.failed[name] = f"{type(result).__name__}: {result}".strip()
            wave = not_replayed(
                name, deployments[name].model, run_id, offers[name], outcome.failed[name]
            )
            spool.write_wave(wave, db_path)
            outcome.unreplayed.append(wave)
            continue
        outcome.waves.append(result)
    try:
        spool.stage_spool(db_path, None, run_id)
    except SparkcapError as exc:
        raise ReplayError(
            f"the replay's waves are spooled but not staged ({exc}); run `sparkcap stage "
            f"--db {db_path}` once the warehouse is free"
        ) from None
    for name in names:
        status = "failed" if name in outcome.failed else "ok"
        record_step_to(db_path, run_id, name, "replay", status, outcome.failed.get(name, ""))
    return outcome


def require_planned(fleet: Fleet, offers: dict[str, ReplayOptions]) -> None:
    """Every deployment the plan routes load to is in the fleet replayed, or the replay is
    refused before it sends anything: a plan replayed in part is not the plan."""
    missing = sorted(set(offers) - {d.name for d in fleet.deployments})
    if missing:
        raise ReplayError(
            f"the plan routes load to {', '.join(missing)}, which the fleet file does not "
            "name: replay it with a fleet file that has every planned deployment"
        )


def search_replays(
    fleet: Fleet,
    db_path: Path,
    run_id: str,
    offers: dict[str, ReplayOptions],
    steps: int,
    on_step: Callable[[int, list[ReplayRow], dict[str, str]], None] | None = None,
    dbt_vars: dict[str, Any] | None = None,
) -> tuple[str, dict[str, Bracket]]:
    """lambda* by replay (``sparkcap replay --search``): each step replays every deployment
    still searching at its own factor of the plan's rates (one replay, one seed: the same
    instants, scaled), dbt judges each, and each deployment's bracket moves
    (:class:`Bracket`). The steps share a search id; ``marts.fct_replay_search`` reads them
    together. ``dbt_vars``: the plan's, so each judgement reads the model the offer came from.
    Returns the search id and each deployment's bracket."""
    search_id = secrets.token_hex(4)
    brackets = {name: Bracket() for name in offers}
    for step in range(1, steps + 1):
        live = {n: b for n, b in brackets.items() if b.stopped is None}
        if not live:
            break
        replay_id = secrets.token_hex(4)
        step_offers = {
            n: offers[n].model_copy(
                update={"rate_factor": b.factor, "search_id": search_id, "replay_id": replay_id}
            )
            for n, b in live.items()
        }
        outcome = asyncio.run(run_replays(fleet, db_path, run_id, step_offers))
        build(db_path, select=" ".join(REPLAY_MODELS), dbt_vars=dbt_vars)
        rows = marts.replays(db_path, run_id, outcome.wave_ids)
        by_name = {r.deployment: r for r in rows}
        for name, bracket in live.items():
            if name in outcome.failed:
                bracket.stopped = f"not replayed: {outcome.failed[name]}"
            else:
                found = by_name.get(name)
                bracket.record(found.verdict if found is not None else "nothing measured")
        if on_step is not None:
            on_step(step, rows, outcome.failed)
    build(db_path, select="fct_replay_search", dbt_vars=dbt_vars)
    return search_id, brackets
