"""Energy per wave from the simulator's DCGM-style power page.

The simulator draws idle_power_w plus power_per_stream_w for each admitted request, so the
energy of a wave is known from what the client recorded: the idle draw over the readings'
window plus each stream's share over the part of its life inside it. The marts must agree
with that both from the energy counter and from the draw alone (trapezoid), and a deployment
without a power source, or with one that answers 404, must never read 0 J.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import duckdb
import pytest

from sparkcap.config.deployment import Deployment
from sparkcap.config.plan import SweepPlan, SweepRequest
from sparkcap.night.sweeps import run_sweeps
from sparkcap.servers.sim.server import SimServer
from sparkcap.transform.dbt_build import run_models
from tests.support.sims import fast_profile
from tests.support.timing import SHORT_STREAM_VARS

pytestmark = pytest.mark.integration

IDLE_W, PER_STREAM_W = 60.0, 15.0
# capacity's bootstrap interval is not what this test reads: fewer resamples, a faster build
DBT_VARS = {**SHORT_STREAM_VARS, "bootstrap_samples": 20}


def known_energy_bounds_j(
    con: duckdb.DuckDBPyConnection, run_id: str, deployment: str
) -> tuple[float, float, float]:
    """Bounds on the simulator's integral over each counted wave's reading window, from the
    client's own record: the idle draw over the window plus each stream's share over the part
    of its life inside it. The server holds a slot from admission to release, which lies
    within the client's sent..end (upper bound) and spans at least its first..last token
    (lower bound): a loaded machine widens the gap between the two, never the truth.

    Also the longest gap between two readings: a trapezoid misses up to one stream's share
    over half a gap at each admission and release."""
    (lower, upper, gap_ns) = con.execute(
        """
        with readings as (
            select p.wave_id, p.t_ns, p.t_ns - lag(p.t_ns) over (
                partition by p.wave_id, p.sensor order by p.t_ns, p.seq
            ) as gap_ns
            from raw.power_samples as p join raw.waves as w using (wave_id)
            where w.run_id = ? and w.deployment = ? and w.trial >= 1
        ),
        windows as (
            select wave_id, min(t_ns) as t0, max(t_ns) as t1, max(gap_ns) as gap_ns
            from readings group by wave_id
        ),
        streams as (
            select
                x.wave_id,
                sum(greatest(0, least(r.end_ns, x.t1) - greatest(r.sent_ns, x.t0))) / 1e9
                    as longest_s,
                sum(greatest(0, least(r.last_token_ns, x.t1) - greatest(r.first_token_ns, x.t0)))
                    / 1e9 as shortest_s
            from windows as x join raw.requests as r using (wave_id)
            group by x.wave_id
        )
        select
            sum(? * (x.t1 - x.t0) / 1e9 + ? * s.shortest_s),
            sum(? * (x.t1 - x.t0) / 1e9 + ? * s.longest_s),
            max(x.gap_ns)
        from windows as x join streams as s using (wave_id)
        """,
        [run_id, deployment, IDLE_W, PER_STREAM_W, IDLE_W, PER_STREAM_W],
    ).fetchone() or (None, None, None)
    assert lower is not None and upper is not None and gap_ns is not None
    return float(lower), float(upper), gap_ns / 1e9


def energy_from_readings_j(
    con: duckdb.DuckDBPyConnection, run_id: str, deployment: str, quantity: str
) -> float:
    """The wave energies as the readings of ``quantity`` give them, summed over the counted
    waves and sensors: a counter's last value less its first, or the trapezoid under the
    draws. What the marts must reproduce to the joule, however the loaded machine timed them."""
    (joules,) = con.execute(
        """
        with readings as (
            select
                p.wave_id, p.sensor, p.quantity, p.t_ns, p.value,
                lag(p.t_ns) over series as prev_t_ns,
                lag(p.value) over series as prev_value
            from raw.power_samples as p join raw.waves as w using (wave_id)
            where w.run_id = ? and w.deployment = ? and w.trial >= 1 and p.status = 'ok'
                and p.quantity = ?
            window series as (partition by p.wave_id, p.sensor order by p.t_ns, p.seq)
        ),
        per_sensor as (
            select
                case when any_value(quantity) = 'energy_j'
                    then arg_max(value, t_ns) - arg_min(value, t_ns)
                    else sum((t_ns - prev_t_ns) / 1e9 * (value + prev_value) / 2)
                end as joules
            from readings group by wave_id, sensor
        )
        select sum(joules) from per_sensor
        """,
        [run_id, deployment, quantity],
    ).fetchone() or (None,)
    assert joules is not None
    return float(joules)


def rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    cur = con.execute(sql, params)
    names = [c[0] for c in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def test_energy_marts_match_the_simulated_integral(db_path: Path) -> None:
    # 150-token waves (~1.5 s at one stream): the sampler's first and last readings land up to
    # a request inside the wave's edges, and in a 60-token wave (0.6 s) that can cut a whole fifth
    # of the energy on a loaded machine (one stream can read under the idle 60 W)
    plan = SweepPlan(levels=(1, 4), trials=1, warmup=False, max_tokens=150, max_remeasures=0)
    short = SweepPlan(levels=(1,), trials=1, warmup=False, max_tokens=40, max_remeasures=0)
    power = dict(idle_power_w=IDLE_W, power_per_stream_w=PER_STREAM_W)
    # one engine (one simulated GPU) per deployment, so that they can run side by side
    profiles = [fast_profile(m, **power) for m in ("m", "n", "o", "p")]
    with SimServer(profiles) as sim:
        page = f"{sim.base_url}/dcgm/metrics"

        def dep(name: str, model: str, **kw: Any) -> Deployment:
            return Deployment(name=name, model=model, endpoint=sim.endpoint, **kw)

        deps = [
            # gpu 0 is model m's engine: its energy counter is read
            dep(
                "counted", "m", power={"kind": "dcgm", "url": page, "gpus": [0], "interval_s": 0.1}
            ),
            # gpu 1 (model n), its draw alone: the trapezoid
            dep(
                "drawn",
                "n",
                power={
                    "kind": "dcgm",
                    "url": page,
                    "gpus": [1],
                    "metric": "DCGM_FI_DEV_POWER_USAGE",
                    "interval_s": 0.1,
                },
            ),
            dep("unpowered", "o"),
            dep("missing", "p", power={"kind": "dcgm", "url": f"{sim.base_url}/no/metrics"}),
        ]
        reqs = [
            SweepRequest(deployment=d, workload="code", plan=plan if i < 2 else short)
            for i, d in enumerate(deps)
        ]
        run_id = asyncio.run(run_sweeps(reqs, db_path, parallel_deployments=True)).run_id
    run_models(db_path, ["+fct_energy_at_capacity"], DBT_VARS)
    with duckdb.connect(str(db_path), read_only=True) as con:
        energy = {
            (r["deployment"], r["concurrency"]): r
            for r in rows(con, "select * from marts.fct_energy where run_id = ?", [run_id])
        }
        at_capacity = {
            r["deployment"]: r
            for r in rows(
                con, "select * from marts.fct_energy_at_capacity where run_id = ?", [run_id]
            )
        }
        methods = dict(
            con.execute(
                "select deployment, string_agg(distinct energy_method) "
                "from intermediate.int_wave_energy where run_id = ? group by all",
                [run_id],
            ).fetchall()
        )
        known = {d: known_energy_bounds_j(con, run_id, d) for d in ("counted", "drawn")}
        from_readings = {
            d: energy_from_readings_j(con, run_id, d, q)
            for d, q in (("counted", "energy_j"), ("drawn", "power_w"))
        }
        tokens = dict(
            con.execute(
                "select w.deployment, sum(r.completion_tokens) from raw.requests as r "
                "join raw.waves as w using (wave_id) where w.run_id = ? and r.status = 'ok' "
                "group by all",
                [run_id],
            ).fetchall()
        )
        capacity = dict(
            con.execute(
                "select deployment, capacity_streams from marts.fct_capacity where run_id = ?",
                [run_id],
            ).fetchall()
        )
        unpowered_samples = con.execute(
            "select count(*) from raw.power_samples join raw.waves using (wave_id) "
            "where run_id = ? and deployment = 'unpowered'",
            [run_id],
        ).fetchone()
    assert methods == {"counted": "counter", "drawn": "trapezoid", "missing": None}
    for d in ("counted", "drawn"):
        levels = [energy[(d, 1)], energy[(d, 4)]]
        assert all(r["status"] == "measured" and r["unavailable_reason"] is None for r in levels)
        measured = sum(r["energy_j"] for r in levels)
        # the marts' arithmetic, exactly: the readings' own energy
        assert measured == pytest.approx(from_readings[d], rel=1e-9), d
        # and the readings are the simulated draw. A reading stands for the midpoint of its
        # request, while the server read its counter somewhere inside it: on a loaded machine
        # (3 % under the lower bound is possible) the window's edges move by up to half a request,
        # so 10 % either way; a trapezoid may also miss half a gap's share at each of the
        # 5 streams' two transitions. Dropping the streams' share would read ~40 % low.
        lower, upper, gap_s = known[d]
        slack_j = 0.0 if d == "counted" else 5 * PER_STREAM_W * gap_s
        assert 0.9 * lower - slack_j <= measured <= 1.1 * upper + slack_j, (d, known[d], measured)
        # more streams draw more (4 streams 120 W, one 75 W)
        assert levels[1]["mean_power_w"] > levels[0]["mean_power_w"] > 0
        # A mean power is the counter's rise over its readings' span, each reading stamped at
        # its read's midpoint while the server read its counter somewhere inside it: on a
        # loaded client one stream can read 55.4 W, under the idle 60 W nothing can draw less
        # than. The marts state the range the reads' round trips allow,
        # and whatever the load, it holds a draw the simulator can make: between idle and
        # idle plus every stream of the level (a trapezoid's range is its mean: 0 s of doubt)
        for c, r in ((1, levels[0]), (4, levels[1])):
            assert r["span_uncertainty_s"] is not None and r["span_uncertainty_s"] >= 0, r
            low, high = r["mean_power_low_w"], r["mean_power_high_w"]
            assert low <= r["mean_power_w"] and (high is None or r["mean_power_w"] <= high), r
            assert low <= IDLE_W + c * PER_STREAM_W and (high is None or high >= IDLE_W), (d, c, r)
            if d == "drawn":
                assert r["span_uncertainty_s"] == 0 and low == high == r["mean_power_w"], r
            # the readings hold the streams' lives (else the wave would be unavailable), and
            # the marts say how much of the window the streams filled
            assert 0 < r["streams_span_s"] <= r["span_s"], r
        assert sum(r["generated_tokens"] for r in levels) == tokens[d]
        for r in levels:
            # the whole window charged: the lower bound; the streams' own span: the figure
            low_tpj = r["generated_tokens"] / r["energy_j"]
            assert r["tokens_per_joule_low"] == pytest.approx(low_tpj), r
            assert 0 < r["streams_energy_j"] <= r["energy_j"], r
            assert r["tokens_per_joule"] == pytest.approx(
                r["generated_tokens"] / r["streams_energy_j"]
            ), r
        cap = at_capacity[d]
        assert cap["capacity_streams"] == capacity[d] >= 1
        at = energy[(d, capacity[d])]
        assert cap["status"] == "measured"
        assert cap["tokens_per_joule"] == pytest.approx(at["tokens_per_joule"])
        assert cap["streams_per_kw"] == pytest.approx(capacity[d] / (at["mean_power_w"] / 1000))
        assert cap["streams_per_kw_high"] == pytest.approx(
            capacity[d] / (at["mean_power_low_w"] / 1000)
        )
    # no power source: no rows at all, never 0 J
    assert unpowered_samples == (0,)
    assert not any(d == "unpowered" for d, _ in energy) and "unpowered" not in at_capacity
    # a power page that 404s: unavailable, with the reason, and no figure
    for c in (1,):
        missing = energy[("missing", c)]
        assert missing["status"] == "unavailable" and missing["energy_j"] is None
        assert missing["tokens_per_joule"] is None and missing["mean_power_w"] is None
        assert "answered 404" in missing["unavailable_reason"]
    assert at_capacity["missing"]["status"] == "unavailable"
    assert at_capacity["missing"]["streams_per_kw"] is None
    assert "answered 404" in at_capacity["missing"]["unavailable_reason"]
