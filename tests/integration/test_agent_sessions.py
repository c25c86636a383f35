"""Agent sessions measured on simulated servers whose truth is known.

Four deployments on one simulator, each a known answer:
- ``oneslot`` has one request slot and a cache that holds every session: each turn decodes
  alone (the same ~50 tok/s at one session and at two), but at two sessions a turn waits for
  the other session's answer, so the turns' TTFT p90 passes a ceiling at one session and not
  at two. Its reset route works: every wave is verified cold, its later turns as planned.
- ``evict`` holds 640 tokens of prefix cache: one session (≤ ~600 tokens) fits, two do not,
  so its level-2 wave is flagged and its level-1 wave is not.
- ``nocache`` caches nothing: every wave with later turns is 'not cached'.
- ``ignored`` answers the reset with 200 and forgets nothing: its second wave's first turns
  find the shared system prompt, so that reset 'did not take'.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest

from sparkcap.config.deployment import Deployment
from sparkcap.config.plan import SearchPlan, SweepPlan, SweepRequest
from sparkcap.config.sessions import SessionShape
from sparkcap.night.sweeps import run_sweeps
from sparkcap.servers.sim.server import SimServer
from sparkcap.transform.dbt_build import run_models
from tests.spread import within
from tests.support.cli import sweep_args
from tests.support.queries import q
from tests.support.sims import fast_profile
from tests.support.timing import RELAXED_TIMING

# serial (the timing phase): every test here holds a live turn's TTFT, ~0.01 s at one session
# on a slot, under a 0.15 s ceiling that a turn waiting behind another's answer (~0.3 s)
# exceeds; a stall of a tenth of a second in a starved parallel worker crosses it (a
# simulated server's pace held to a tolerance is a timing test)
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.client_timing]

SHAPE = SessionShape(
    turns=3,
    system_tokens=150,
    repo_context_tokens=250,
    tool_result_tokens=50,
    answer_tokens=16,
    think_s=0.05,
    seed=7,
)
PROFILES = [
    fast_profile("oneslot", step_s1=0.02, draft_tokens=0, max_slots=1),
    fast_profile("evict", draft_tokens=0, cache_capacity_tokens=640),
    fast_profile("nocache", draft_tokens=0, prefix_cache=False),
    fast_profile("ignored", draft_tokens=0, cache_reset="ignored"),
]
# at one slot a waiting turn sits behind another session's 16-token answer (~0.3 s)
CEILING_S = 0.15


def _by_deployment_and_level(db: Path, sql: str) -> dict[tuple[Any, Any], tuple[Any, ...]]:
    """The rows of ``sql`` by their first two columns (deployment, sessions at once): the rest."""
    return {(row[0], row[1]): row[2:] for row in q(db, sql)}


def test_sessions_capacity_and_cache_state_are_what_the_servers_do(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 16-token turns: the night's live re-measure and its build both judge with relaxed timing
    for k, v in RELAXED_TIMING.items():
        monkeypatch.setenv(k, v)
    plan = SweepPlan(levels=(1, 2), trials=1, warmup=False, sessions=SHAPE)
    with SimServer(PROFILES) as sim:
        requests = [
            SweepRequest(
                deployment=Deployment(
                    name=p.model,
                    endpoint=sim.endpoint,
                    model=p.model,
                    extra_body={"ignore_eos": True},
                ),
                workload="agent",
                plan=plan,
            )
            for p in PROFILES
        ]
        asyncio.run(run_sweeps(requests, db_path))

    run_models(
        db_path,
        ["+fct_session_turns", "+fct_session_cache", "+fct_levels"],
        {"ttft_ceiling_s": CEILING_S, "bootstrap_samples": 20},
    )
    raw = q(
        db_path,
        "select w.deployment, w.concurrency, count(*), count(distinct r.session_id), "
        "max(r.turn_index), bool_and(r.status = 'ok') from raw.requests r "
        "join raw.waves w using (wave_id) group by all",
    )
    # (cache state, reset verdict, flagged) at each (deployment, sessions at once)
    cache = _by_deployment_and_level(
        db_path,
        "select deployment, concurrent_sessions, cache_state, reset_verdict, is_flagged "
        "from marts.fct_session_cache",
    )
    # the levels as users read them, (rate, TTFT quantile, passes): the mart carries the
    # figure the rule holds
    levels = _by_deployment_and_level(
        db_path,
        "select deployment, concurrency, median_decode_tok_s, ttft_quantile_s, "
        "passes_threshold from marts.fct_levels",
    )
    rule = q(db_path, "select distinct ttft_quantile, ttft_ceiling_s from marts.fct_levels")
    ceiling_met = dict(
        q(
            db_path,
            "select concurrency, meets_ttft_ceiling from marts.fct_levels "
            "where deployment = 'oneslot'",
        )
    )
    # the samples behind each level's turn p90: 3 turns a session, far below the 64 a
    # p90 needs at 0.99 (dbt macro tail_min_samples), so no figure is printed for it
    support = q(
        db_path,
        "select distinct concurrency, ttft_quantile_samples, ttft_quantile_min_samples, "
        "ttft_quantile_is_supported from marts.fct_levels where deployment = 'oneslot'",
    )
    turn_support = q(
        db_path,
        "select distinct n_ttft_samples, ttft_quantile_min_samples, ttft_quantile_is_supported "
        "from marts.fct_session_turns where deployment = 'oneslot' and concurrent_sessions = 2",
    )
    turns = q(
        db_path,
        "select turn_index, median_prompt_tokens from marts.fct_session_turns "
        "where deployment = 'oneslot' and concurrent_sessions = 1 order by turn_index",
    )

    # every session sent every turn, each a recorded stream with its session and turn
    assert sorted(raw) == sorted(
        (p.model, c, c * SHAPE.turns, c, SHAPE.turns - 1, True) for p in PROFILES for c in (1, 2)
    )
    # each turn appends one answer and one tool result (~66 tokens, plus chat framing)
    growth = [b[1] - a[1] for a, b in itertools.pairwise(turns)]
    assert len(growth) == 2 and all(60 <= g <= 90 for g in growth), turns

    # one slot: the rate holds at two sessions, the next turn's first token does not
    (r1, t1, p1), (r2, t2, p2) = levels[("oneslot", 1)], levels[("oneslot", 2)]
    assert r1 >= 20 and r2 >= 20 and abs(r2 - r1) / r1 < 0.15, levels
    within("oneslot: turns' TTFT p90 at one session, s", t1, high=CEILING_S, context=levels)
    within("oneslot: turns' TTFT p90 at two sessions, s", t2, low=CEILING_S, context=levels)
    assert rule == [(0.9, CEILING_S)]
    assert ceiling_met == {1: True, 2: False}  # the verdict the table marks with '> ceiling'
    assert p1 and not p2
    assert sorted(support) == [(1, SHAPE.turns, 64, False), (2, 2 * SHAPE.turns, 64, False)]
    assert turn_support == [(2, 64, False)]

    assert cache[("oneslot", 1)] == ("as planned", "verified", False)
    assert cache[("oneslot", 2)] == ("as planned", "verified", False)
    assert cache[("evict", 1)][0] == "as planned" and not cache[("evict", 1)][2]
    assert cache[("evict", 2)][0] in ("evicted", "not cached") and cache[("evict", 2)][2]
    assert all(cache[("nocache", c)][0] == "not cached" for c in (1, 2))
    # the first wave had nothing before it to find; the second found the shared system prompt
    assert cache[("ignored", 1)][1] == "verified"
    assert cache[("ignored", 2)][1:] == ("did not take", True)


def test_a_search_of_sessions_stops_where_the_turns_start_too_late(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One slot: the rate holds at any level, the turns' TTFT does not past one session. The
    live search fails level 2 on dbt's TTFT rule after its first trial (never on the rate),
    and the path of record agrees: capacity 1 session."""
    for k, v in {
        **RELAXED_TIMING,
        "SPARKCAP_DBT_VARS": json.dumps(
            {**json.loads(RELAXED_TIMING["SPARKCAP_DBT_VARS"]), "ttft_ceiling_s": CEILING_S}
        ),
    }.items():
        monkeypatch.setenv(k, v)
    plan = SweepPlan(levels=(1,), sessions=SHAPE, search=SearchPlan(max_level=4, trials_max=2))
    with SimServer([PROFILES[0]]) as sim:
        dep = Deployment(
            name="oneslot", endpoint=sim.endpoint, model="oneslot", extra_body={"ignore_eos": True}
        )
        asyncio.run(
            run_sweeps([SweepRequest(deployment=dep, workload="agent", plan=plan)], db_path)
        )
    run_models(db_path, ["+fct_capacity", "+int_search_levels"], {"bootstrap_samples": 20})
    live = q(
        db_path,
        "select concurrency, live_verdict, stop_reason from raw.search_levels "
        "where kind = 'level' order by search_step",
    )
    path = q(
        db_path,
        "select concurrency, verdict, verdict_reason from intermediate.int_search_levels "
        "where kind = 'level' order by concurrency",
    )
    ((verdict,),) = q(db_path, "select capacity_verdict from marts.fct_capacity")
    assert [c for c, *_ in live] == [1, 2], live
    assert live[1][1] == "fail" and "TTFT" in live[1][2], live
    assert path[1][1:] == ("fail", "turn TTFT over the ceiling"), path
    assert verdict.startswith("1 session"), verdict


def test_a_cli_search_of_sessions_on_two_slots_finds_two_and_its_tier_agrees(
    tmp_path: Path,
) -> None:
    """Two slots hold two sessions' turns at once; a third session's turn
    waits for a slot behind another's answer, over the TTFT ceiling. `sparkcap sweep --workload
    agent --search` answers 2 sessions, its sustain wave's turns are judged by their own TTFT
    (they held), the tier of record is the capacity, and the sweep's build passes (exit 0)."""
    from tests.support.cli import cli_in_process

    shape = ",".join(
        f"{k}={v}"
        for k, v in {
            "turns": SHAPE.turns,
            "system_tokens": SHAPE.system_tokens,
            "repo_context_tokens": SHAPE.repo_context_tokens,
            "tool_result_tokens": SHAPE.tool_result_tokens,
            "answer_tokens": SHAPE.answer_tokens,
            "think_s": SHAPE.think_s,
            "seed": SHAPE.seed,
        }.items()
    )
    dbt_vars = {
        **json.loads(RELAXED_TIMING["SPARKCAP_DBT_VARS"]),
        "ttft_ceiling_s": CEILING_S,
        "bootstrap_samples": 20,
    }
    env = {**os.environ, "SPARKCAP_DBT_VARS": json.dumps(dbt_vars)}
    db = tmp_path / "agent.duckdb"
    twoslot = fast_profile("twoslot", step_s1=0.02, draft_tokens=0, max_slots=2)
    with SimServer([twoslot]) as sim:
        res = cli_in_process(
            *sweep_args(sim.endpoint, "twoslot", "agent"),
            "--extra-body",
            '{"ignore_eos": true}',
            "--sessions",
            shape,
            "--search",
            "--max-level",
            "4",
            "--trials-max",
            "2",
            "--db",
            str(db),
            env=env,
        )
    print(res.stdout[-3000:], res.stderr[-3000:], sep="\n")
    (cap,) = q(db, "select capacity_streams, capacity_verdict from marts.fct_capacity")
    (tier,) = q(
        db, "select capacity_streams from marts.fct_capacity_tiers where is_threshold_of_record"
    )
    sustain = q(
        db,
        "select concurrency, ttft_p90_s, passes_tier from intermediate.int_tier_levels "
        "where kind = 'sustain' and is_threshold_of_record",
    )
    path = q(
        db,
        "select kind, concurrency, verdict from intermediate.int_search_levels "
        "order by search_step",
    )
    print("capacity", cap, "tier", tier, "sustain", sustain, "path", path, sep="\n")
    assert res.returncode == 0, res.stderr[-2000:]
    assert cap[0] == 2 and cap[1].startswith("2 sessions"), cap
    assert tier == (2,), tier
    # the sustain wave at 2 carries its turns' measured TTFT, within the ceiling
    assert [(c, p) for c, _, p in sustain] == [(2, True)], sustain
    for _, ttft_p90_s, _ in sustain:
        within("twoslot: sustain turns' TTFT p90, s", ttft_p90_s, high=CEILING_S, context=sustain)
