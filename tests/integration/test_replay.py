"""Issues 36 and 58: the plan replayed open-loop on simulated servers whose truth is known.

Two deployments, each on its own simulator, decode rate r(c) = r1 / (1 + a (c - 1)) at c
streams (one token a step, no drafts, four tokens a chunk), swept at 4, 8 and 16 streams of
48 tokens:
- ``steady`` (r1 38, a 0.1): 22.4 tok/s at 8, 15.2 at 16, so its burst capacity is 8 and the
  burst plan gives it 8 streams;
- ``roomy`` (r1 30, a 0.02): 23.1 tok/s even at 16, a burst capacity of at least 16.
The rate plan (the default replay) routes each deployment its open-loop capacity lambda*
(fct_open_loop_capacity; roomy's past its tested 16 streams, on the curve's last slope): at
1.0x both hold, near the streams in flight and the median the model predicts; at 1.3x the
streams slow, stay longer and pile up (Little's feedback), and both fail, named.
A client stalled on purpose sends late: its requests' TTFT from the scheduled start shows the
stall, the send-time TTFT does not.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import duckdb
import pytest

from sparkcap.config.deployment import Deployment
from sparkcap.config.plan import SweepPlan, SweepRequest
from sparkcap.config.probes import ReplayOptions
from sparkcap.loadgen.records import WaveRecord
from sparkcap.loadgen.replay import poisson_arrivals, replay
from sparkcap.night.sweeps import run_sweeps
from sparkcap.servers.sim.profile import SimProfile
from sparkcap.servers.sim.server import SimProcess, SimServer
from sparkcap.store import spool
from sparkcap.transform.dbt_build import build
from tests.spread import within
from tests.support.cli import cli_in_process
from tests.support.fleets import write_fleet
from tests.support.queries import q
from tests.support.sims import linear_profile
from tests.support.timing import RELAXED_TIMING

# a replay is valid only while the client keeps its schedule (vars replay_max_send_lag_s,
# replay_max_late_share):
# beside other tests on two cores the client fell behind, so these run in the timing phase
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.client_timing]

LEVELS = (4, 8, 16)
TOKENS = 48
PROFILES = {"steady": (38.0, 0.1), "roomy": (30.0, 0.02)}


def _profile(name: str) -> SimProfile:
    # four tokens a chunk (vLLM's --stream-interval): a quarter of the events for the
    # simulator and the client to carry, the rates the same (counts come from usage)
    return linear_profile(name, *PROFILES[name], stream_interval_tokens=4)


def _sim(name: str) -> SimProcess:
    return SimProcess({"profiles": [_profile(name).model_dump()]})


def _dep(name: str, endpoint: str) -> Deployment:
    return Deployment(name=name, endpoint=endpoint, model=name, extra_body={"ignore_eos": True})  # type: ignore[arg-type]


def _cli(*args: str, exits: tuple[int, ...] = (0,)) -> str:
    """The command's output; its exit status one of ``exits`` (a replay whose plan does not
    hold exits 3, for a script to gate on)."""
    p = cli_in_process(*args)
    assert p.returncode in exits, (p.returncode, p.stdout, p.stderr)
    return p.stdout


def test_the_plan_holds_open_loop_at_its_rate_and_fails_at_1_3x_where_the_model_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k, v in RELAXED_TIMING.items():
        monkeypatch.setenv(k, v)
    db = tmp_path / "w.duckdb"
    # one simulator process each, apart from the client: in the test's own process (threads
    # under one GIL) the busier deployment's streams slowed the other's steps (steady read
    # 20 tok/s and held 14 in flight beside roomy, 24.7 tok/s and 9.4 alone)
    with _sim("steady") as steady, _sim("roomy") as roomy:
        endpoints = {"steady": steady.endpoint, "roomy": roomy.endpoint}
        plan = SweepPlan(levels=LEVELS, trials=1, warmup=False, max_tokens=TOKENS)
        asyncio.run(
            run_sweeps(
                [
                    SweepRequest(deployment=_dep(n, endpoints[n]), workload=w, plan=plan)
                    for n in PROFILES
                    for w in ("code", "prose")
                ],
                db,
            )
        )
        # the whole night's build, as a night makes it: the report rendered after the
        # replays reads every mart
        build(db, dbt_vars={"bootstrap_samples": 20})
        fleet = tmp_path / "fleet.yaml"
        workloads = {"levels": list(LEVELS), "trials": 1, "warmup": False, "max_tokens": TOKENS}
        deployments = [
            {"name": n, "model": n, "endpoint": endpoints[n], "extra_body": {"ignore_eos": True}}
            for n in PROFILES
        ]
        fleet_doc = {
            "name": "replayed",
            "threshold_tok_s": 20,
            "workloads": {"code": workloads, "prose": workloads},
            "deployments": deployments,
        }
        write_fleet(fleet, fleet_doc)
        common = ["--fleet", str(fleet), "--db", str(db), "--long-prompts", "0", "--duration"]
        at_plan = _cli("replay", *common, "32", "--seed", "3", exits=(0, 3))
        over = _cli("replay", *common, "32", "--seed", "3", "--rate-factor", "1.3", exits=(3,))
        # lambda* by replay: from the plan (1.0x) a hold widens to 1.25x and a failure narrows
        # to 0.8x; two short steps, each judged by dbt, read together
        searched = _cli("replay", *common, "20", "--seed", "4", "--search", "--steps", "2")
    # the night's report, rendered again after its replays, shows them
    _cli("report", "--db", str(db), "--out", str(tmp_path / "reports"))
    page = next((tmp_path / "reports").glob("*/index.html")).read_text(encoding="utf-8")

    with duckdb.connect(str(db), read_only=True) as con:
        routed = dict(
            con.execute(
                "select deployment, code_streams + prose_streams from marts.fct_plan_routing"
            ).fetchall()
        )
        rates = dict(
            con.execute(
                "select deployment || '/' || workload, arrivals_per_s from marts.fct_replay_plan"
            ).fetchall()
        )
        replays = {
            (d, f): (v, inflight, tok_s, predicted_inflight, predicted_tok_s)
            for d, f, v, inflight, tok_s, predicted_inflight, predicted_tok_s in con.execute(
                "select deployment, rate_factor, verdict, mean_streams_in_flight, "
                "median_decode_tok_s, predicted_mean_in_flight, "
                "coalesce(predicted_code_median_tok_s, predicted_prose_median_tok_s) "
                "from marts.fct_replay where search_id is null"
            ).fetchall()
        }
        kinds = {k for (k,) in con.execute("select plan_kind from marts.fct_replay").fetchall()}
        search = con.execute(
            "select deployment, n_steps, steps, search_text from marts.fct_replay_search "
            "order by deployment"
        ).fetchall()
        fleet_verdicts = dict(
            con.execute(
                "select f.rate_factor, f.plan_verdict from marts.fct_replay_fleet as f "
                "where not exists (select 1 from marts.fct_replay as r "
                "where r.replay_id = f.replay_id and r.search_id is not null)"
            ).fetchall()
        )
        late = con.execute(
            "select deployment, rate_factor, late_share from marts.fct_replay "
            "where search_id is null"
        )
        late_shares = late.fetchall()

    assert routed == {"steady": 8, "roomy": 16}, routed
    # Little's rates for what each deployment is routed (a workload routed nothing: 0)
    assert {k.split("/")[0] for k, r in rates.items() if r > 0} == {"steady", "roomy"}, rates
    assert kinds == {"rate"}, kinds  # the rate plan is the default
    # the search's steps, each deployment at its own factor, read as one bracket per deployment
    # (a step that decides nothing, too short or without a verdict, ends that deployment's)
    assert [d for d, _, _, _ in search] == ["roomy", "steady"], search
    for _, n, steps, words in search:
        assert n in (1, 2) and steps.startswith("1.0: "), search
        assert n == 1 or steps.split(", ")[1].startswith(("1.25: ", "0.8: ")), search
        assert words in searched, (words, searched)
    assert "lambda* by replay, run" in searched and "search step 1 of 2:" in searched
    # at lambda* each runs near what the model predicts (streams in flight within 25 %, the
    # median within -10..+20 %); at 1.3x both fail, piled past the 1.0x streams in flight at
    # medians below the threshold
    for name in PROFILES:
        at, above = replays[(name, 1.0)], replays[(name, 1.3)]
        # at lambda* the model puts the median on the threshold: steady's curved engine
        # measures above what the model predicts (the stream-time-weighted mean sits below the
        # median there) and holds; roomy's nearly flat one, extrapolated past its tested 16
        # streams, reads within noise of the threshold, and a replay of hundreds of streams
        # has an interval narrow enough to land either side of it. That noise is the 32 s
        # replay's own: roomy's median reads 19.4-20.2 tok/s from run to run against a
        # prediction of 20.0-20.1 on an idle machine, and ~19.3 on one loaded past its cores
        # (the simulator decodes on them too), so a failure there is held to 95 % of the
        # prediction: wider than that spread, narrower than the model check below
        assert at[0] == "holds" or (name == "roomy" and at[2] >= 0.95 * at[4]), replays
        assert above[0] == "fails", replays
        within(f"{name} 1.0x: in flight / predicted", at[1] / at[3], 0.75, 1.25, replays)
        within(f"{name} 1.0x: median / predicted", at[2] / at[4], 0.9, 1.2, replays)
        within(f"{name} 1.3x: in flight / 1.0x", above[1] / at[1], low=1.3, context=replays)
        within(f"{name} 1.3x: median decode tok/s", above[2], high=19.0, context=replays)
    assert fleet_verdicts[1.0] in ("holds", "fails at roomy"), fleet_verdicts
    assert fleet_verdicts[1.3] == "fails at roomy, steady", fleet_verdicts
    # the client kept the schedule, as the mart judges it (a share of late sends, not the worst
    # one: a saturated machine can hold one send 0.70 s and the verdicts above are right all
    # the same)
    assert len(late_shares) == 4, late_shares
    for _, _, share in late_shares:
        within("late share of sends", share, high=0.05, context=late_shares)
    assert "steady: holds" in at_plan, at_plan
    assert "the plan fails at roomy, steady" in over, over
    # the line names why steady fails, each a sign of the overload: a median whose interval
    # lies below the threshold (which workload's clears first depends on the streams the seed
    # routed each), the backlog, or the queueing TTFT; never a failed request
    steady_line = next(line for line in over.splitlines() if "steady: fails: " in line)
    overload = (" median ", "a backlog still building", "TTFT p90 from the scheduled start")
    assert any(sign in steady_line for sign in overload), over
    assert "requests failed" not in steady_line, over
    section = page[page.index("<h2>Open-loop replay</h2>") :].split("</section>", 1)[0]
    assert "fails at roomy, steady" in section and "holds" in section
    assert "chart-replay" in section
    assert "TTFT p90 s (scheduled)" in section
    assert '"chart-replay"' in page  # the chart's spec is in the page
    print(at_plan, over, replays, sep="\n")  # the figures, for `pytest -s`


def test_a_stalled_client_shows_in_the_ttft_from_the_scheduled_start_only() -> None:
    """Coordinated omission, made on purpose: the loop blocks 1 s at 1 s into a 3 s replay of
    two deployments (one `sparkcap replay`: one client, one loop, one stall; each making its
    own once blocked the loop twice). Every request due in that second is sent when the loop
    wakes; timed from its schedule it waited the stall, timed from its send it did not."""
    options = ReplayOptions(
        duration_s=3.0, seed=5, planned_streams=2, code_per_s=6.0,
        code_tokens=8, client_stall_s=1.0, client_stall_at_s=1.0, replay_id="5ca11ed1",
    )  # fmt: skip
    due = [a.at_s for a in poisson_arrivals({"code": 6.0, "prose": 0.0, "long": 0.0}, 3.0, 5)]
    assert sum(1.0 <= t < 2.0 for t in due) >= 2  # the seed puts requests inside the stall

    async def both(endpoint: str) -> list[WaveRecord]:
        deps = [
            Deployment(name=n, endpoint=endpoint, model="steady", extra_body={"ignore_eos": True})  # type: ignore[arg-type]
            for n in ("steady", "steady-b")
        ]
        return list(await asyncio.gather(*(replay(d, "r-stall", options) for d in deps)))

    with SimServer([_profile("steady")]) as sim:
        waves = asyncio.run(both(sim.endpoint))
    for wave in waves:
        assert wave.probe == "replay" and wave.replay_offer is not None
        assert len(wave.requests) == len(due) and all(r.status == "ok" for r in wave.requests)
    late = [r for w in waves for r in w.requests if 1.0e9 <= (r.scheduled_ns or 0) < 2.0e9]
    assert late and all(r.sent_ns is not None and r.first_token_ns is not None for r in late)
    for r in late:
        lag_s = (r.sent_ns - r.scheduled_ns) / 1e9  # type: ignore[operator]
        # sent when the loop woke (2.0 s): the lateness is what was left of the stall
        woke_s = lag_s - (2.0 - r.scheduled_ns / 1e9)  # type: ignore[operator]
        within("stalled send: lag past the wake-up, s", woke_s, -0.1, 0.1, r.request_id)
        from_schedule = (r.first_token_ns - r.scheduled_ns) / 1e9  # type: ignore[operator]
        from_send = (r.first_token_ns - r.sent_ns) / 1e9  # type: ignore[operator]
        within("stalled send: TTFT from the send, s", from_send, high=0.3)
        assert from_schedule >= lag_s  # the server was never slow
    worst = max(late, key=lambda r: r.sent_ns - r.scheduled_ns)  # type: ignore[operator]
    assert (worst.first_token_ns - worst.scheduled_ns) / 1e9 > 0.5  # type: ignore[operator]
    on_time = [r for w in waves for r in w.requests if (r.scheduled_ns or 0) < 1.0e9]
    for r in on_time:
        within("on-time send lag, s", (r.sent_ns - r.scheduled_ns) / 1e9, high=0.1)  # type: ignore[operator]


def test_a_stall_while_streams_decode_marks_their_rates_as_the_clients_not_the_servers() -> None:
    """The loop blocks 1 s at 1 s while 48-token streams decode: a stream sent before the stall
    whose first token came during it is stamped at the wake-up, up to 1 s late, so its rate is
    the client's doing; each request carries that bound (dbt leaves such streams out of every
    figure, int_replay_streams), and a stream read wholly after the wake-up carries none."""
    options = ReplayOptions(
        duration_s=3.0, seed=5, planned_streams=2, code_per_s=6.0,
        code_tokens=48, client_stall_s=1.0, client_stall_at_s=1.0, replay_id="5ca11ed2",
    )  # fmt: skip
    with SimServer([_profile("steady")]) as sim:
        wave = asyncio.run(replay(_dep("steady", sim.endpoint), "r-stall-read", options))
    ok = [r for r in wave.requests if r.status == "ok" and r.first_token_ns is not None]
    woke_ns = min(r.sent_ns for r in wave.requests if r.scheduled_ns >= 1.0e9)  # type: ignore[operator,type-var]
    caught = [r for r in ok if r.sent_ns < 1.0e9 and r.first_token_ns > woke_ns - 0.05e9]  # type: ignore[operator]
    after = [r for r in ok if r.first_token_ns > woke_ns + 0.1e9]  # type: ignore[operator]
    assert caught and after, [(r.sent_ns, r.first_token_ns, r.last_token_ns) for r in ok]
    for r in caught:  # past the 0.005 tolerance by far: ~1 s late in a span of ~1.5 s
        within("a stream first read at the wake-up: bound", r.timing_error_bound, low=0.1)
    for r in after:
        within("a stream read after the wake-up: bound", r.timing_error_bound, high=0.005)


def test_long_prompts_are_a_third_arrival_process_sent_on_their_own_schedule() -> None:
    """The plan's long prompts (its long-prompt rate) arrive as their own Poisson process
    beside the streams: each is sent at its instant, as the long document it is (the server
    counts its prompt), and recorded with its role, apart from the code streams whose rates
    the verdict reads. Run with --long-prompts 0 elsewhere, this is where a replay sends them."""
    options = ReplayOptions(
        duration_s=3.0, seed=5, planned_streams=2, code_per_s=4.0, code_tokens=8,
        long_per_min=40.0, long_prompt_tokens=2000,
    )  # fmt: skip
    due = poisson_arrivals({"code": 4.0, "prose": 0.0, "long": 40.0 / 60}, 3.0, 5)
    due_long = sorted(a.at_s for a in due if a.role == "long")
    assert len(due_long) == 2  # round(40/min x 3 s)
    with SimServer([_profile("steady")]) as sim:
        wave = asyncio.run(replay(_dep("steady", sim.endpoint), "r-long", options))
    longs = sorted((r for r in wave.requests if r.role == "long"), key=lambda r: r.scheduled_ns)
    assert len(longs) == 2 and len(wave.requests) == len(due)
    assert [r.scheduled_ns / 1e9 for r in longs] == pytest.approx(due_long, abs=1e-6)  # type: ignore[operator]
    for r in longs:
        assert r.status == "ok" and r.prompt_tokens is not None and r.prompt_tokens >= 1900
        assert r.sent_ns is not None
        within("long prompt send lag, s", (r.sent_ns - r.scheduled_ns) / 1e9, high=0.1)  # type: ignore[operator]
    codes = [r for r in wave.requests if r.role == "code"]
    assert codes and all(r.status == "ok" and (r.prompt_tokens or 0) < 500 for r in codes)


# a deployment whose prefill is slow enough to see: 4,000-token long prompts prefill in two
# 2,048-token chunks at 4,000 tok/s (~0.5 s each), one decode step of the running streams per
# chunk, so decode beside a prefill falls to ~2.8 tok/s for ~1.09 s; 40 tok/s alone otherwise
PREFILLY = SimProfile(
    model="prefilly", step_s1=1 / 40, batch_slowdown=0.02, context_slowdown=0.0,
    draft_tokens=0, prefill_tok_s=4000, prefill_chunk=2048,
)  # fmt: skip
LONG_TOKENS = 4000
REPLAY_S = 40.0  # the verdict reads the last 30 s (var replay_warmup_share 0.25)


def test_a_replay_checks_the_prefill_budget_on_the_prefills_it_caused(tmp_path: Path) -> None:
    """The plan's prefill budget allows decode below the threshold beside long prefills for at
    most var plan_max_below_threshold_share (5 %) of the time. On ``prefilly`` each long prompt
    costs ~1.09 s below the threshold (the simulator's two prefill chunks): one prompt in the
    30 s the verdict reads is ~3.6 % and holds; five are ~18 % and fail on the prefill budget
    alone, while the streams' median rate still holds the threshold (a stream slowed by one
    prefill still decodes its 96 tokens above 20 tok/s)."""
    seed, warmup_s = 4, 0.25 * REPLAY_S
    offers = {
        name: ReplayOptions(
            duration_s=REPLAY_S, seed=seed, planned_streams=5, code_per_s=2.0, code_tokens=96,
            long_per_min=per_min, long_prompt_tokens=LONG_TOKENS,
            max_below_threshold_share=0.05,  # the plan's default budget share
        )
        for name, per_min in (("within", 1.5), ("over", 10.0))
    }  # fmt: skip
    counted = {}
    for name, o in offers.items():
        due = poisson_arrivals(
            {"code": 2.0, "prose": 0.0, "long": o.long_per_min / 60}, REPLAY_S, seed
        )
        counted[name] = sum(a.role == "long" and warmup_s <= a.at_s < REPLAY_S - 2 for a in due)
    assert counted == {"within": 1, "over": 5}, counted  # the seed's schedule
    db = tmp_path / "w.duckdb"
    profile = {"profiles": [PREFILLY.model_dump()]}
    with SimProcess(profile) as sim_within, SimProcess(profile) as sim_over:
        endpoints = {"within": sim_within.endpoint, "over": sim_over.endpoint}
        deps = {n: _dep("prefilly", e).model_copy(update={"name": n}) for n, e in endpoints.items()}
        plan = SweepPlan(levels=(1,), trials=1, warmup=False, max_tokens=8)
        run_id = asyncio.run(
            run_sweeps(
                [SweepRequest(deployment=d, workload="code", plan=plan) for d in deps.values()], db
            )
        ).run_id

        async def both() -> list[object]:
            return await asyncio.gather(*(replay(deps[n], run_id, offers[n]) for n in offers))

        for wave in asyncio.run(both()):
            spool.write_wave(wave, db)  # type: ignore[arg-type]
        spool.stage_spool(db, None, run_id)
    build(db, select="+fct_replay")
    verdicts = {
        d: rest
        for d, *rest in q(
            db,
            "select deployment, verdict, verdict_text, code_median_decode_tok_s, "
            "n_long_prefills, n_long_prefills_measured, n_long_prefills_below, "
            "prefill_below_threshold_share, late_share from marts.fct_replay",
        )
    }
    prefills = q(
        db,
        "select deployment, prefill_s, decode_beside_tok_s, is_below_threshold "
        "from intermediate.int_replay_prefills order by deployment, prefill_start_s",
    )
    for d, (_, _, median, n_long, measured, below, _, late) in verdicts.items():
        within(f"prefill budget, {d}: late share of sends", late, high=0.05, context=verdicts)
        within(f"prefill budget, {d}: code median tok/s", median, low=25, context=verdicts)
        assert n_long == counted[d] and measured >= n_long - 1 and below == measured, verdicts
    for _, prefill_s, beside, is_below in prefills:
        if beside is None:
            continue
        # the truth: two chunks of ~2,000 tokens at 4,000 tok/s and two decode steps
        within("prefill budget: a long prefill's window, s", prefill_s, 0.95, 1.4, prefills)
        within("prefill budget: decode beside a prefill, tok/s", beside, high=6, context=prefills)
        assert is_below
    (v_in, text_in, *_, share_in, _), (v_over, text_over, *_, share_over, _) = (
        verdicts["within"], verdicts["over"],
    )  # fmt: skip
    within("prefill budget, within: share below", share_in, 0.025, 0.05, verdicts)
    assert v_in == "holds" and text_in.startswith("holds: "), verdicts
    within("prefill budget, over: share below", share_over, low=0.1, context=verdicts)
    assert v_over == "fails" and "beside long prefills" in text_over, verdicts
    assert "median" not in text_over  # the prefill budget failed it, not the decode rates
    print(verdicts, prefills, sep="\n")  # the figures, for `pytest -s`


@pytest.mark.reliability
def test_an_interrupted_replay_hands_over_what_it_sent_marked_interrupted() -> None:
    """Ctrl-C cancels the replay: what it sent (its requests, partial ones included) reaches
    ``on_interrupt`` with an offer saying how far it got, so it is spooled and never judged
    as a whole schedule; the interruption then goes on."""
    options = ReplayOptions(
        duration_s=10.0, seed=5, planned_streams=2, code_per_s=4.0, code_tokens=48,
        replay_id="c0ffee01",
    )  # fmt: skip
    kept: list[WaveRecord] = []

    async def cancelled_after(delay_s: float, endpoint: str) -> None:
        task = asyncio.create_task(
            replay(_dep("steady", endpoint), "r-int", options, on_interrupt=kept.append)
        )
        await asyncio.sleep(delay_s)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with SimServer([_profile("steady")]) as sim:
        asyncio.run(cancelled_after(2.0, sim.endpoint))
    assert len(kept) == 1, kept
    (wave,) = kept
    assert wave.replay_offer is not None and wave.replay_offer.not_replayed_reason is not None
    assert wave.replay_offer.not_replayed_reason.startswith("interrupted 2 s into its 10 s ")
    assert wave.requests and all((r.scheduled_ns or 0) < 2.5e9 for r in wave.requests)
