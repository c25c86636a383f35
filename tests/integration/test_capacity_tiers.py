"""Issue 27, item 2: capacity tiers from one night's stored streams, no new wave.

One simulated grid night at 1, 2, 4 and 8 streams whose median rates (~55, 39, 25 and 15
tok/s) put a different capacity at each of 10, 20, 30 and 50 tok/s, and whose slow prefill
makes the TTFT grow with the level (~0.08 s at one stream, ~0.6 s at eight). Built once at the
fleet's 20 tok/s, marts.fct_capacity_tiers must hold, at each threshold T, the capacity that a
build at `threshold_tok_s = T` (what `sparkcap build --threshold T` passes) puts into
marts.fct_capacity; and a TTFT ceiling the higher levels exceed must cut the tier.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import duckdb
import pytest

from sparkcap.config import Deployment, SweepPlan, SweepRequest
from sparkcap.night.sweeps import run_sweeps
from sparkcap.servers.sim.server import SimServer
from sparkcap.transform.dbt_build import run_models
from tests.integration.helpers import SHORT_STREAM_VARS, fast_profile

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# 18 ms a step at one stream, each further stream 40 % more; 1000 prompt tokens/s prefilled
PROFILE = fast_profile("m", step_s1=0.018, batch_slowdown=0.4, draft_tokens=0, prefill_tok_s=1000)
THRESHOLDS_TOK_S = (10, 20, 30, 50)
TIGHT_CEILING_S = 0.25  # between the TTFT p90 at one stream and at four
LOOSE_CEILING_S = 60.0  # no level comes near it


def _capacity(con: duckdb.DuckDBPyConnection) -> tuple[float, int, bool]:
    row = con.execute(
        "select threshold_tok_s, capacity_streams, is_lower_bound from marts.fct_capacity"
    ).fetchall()
    assert len(row) == 1, row
    return float(row[0][0]), int(row[0][1]), bool(row[0][2])


def test_tiers_are_the_capacity_a_build_at_each_threshold_reports(db_path: Path) -> None:
    with SimServer([PROFILE]) as sim:
        dep = Deployment(
            name="m",
            endpoint=sim.endpoint,
            model="m",
            extra_body={"ignore_eos": True},
        )
        plan = SweepPlan(levels=(1, 2, 4, 8), trials=1, warmup=False, max_tokens=40)
        asyncio.run(run_sweeps([SweepRequest(deployment=dep, workload="code", plan=plan)], db_path))

    night_vars = {
        **SHORT_STREAM_VARS,
        "bootstrap_samples": 20,  # intervals are not what this test reads: a quicker build
        "tier_thresholds_tok_s": list(THRESHOLDS_TOK_S),
        "tier_ttft_p90_ceilings_s": [TIGHT_CEILING_S, LOOSE_CEILING_S],
    }
    # the night's build of the two marts (a whole `dbt build` costs 12-40 s more here)
    run_models(db_path, ["+fct_capacity_tiers", "+fct_capacity"], night_vars)
    with duckdb.connect(str(db_path), read_only=True) as con:
        tiers = {
            (float(t), c): (cap, lower, measured, of_record, by)
            for t, c, cap, lower, measured, of_record, by in con.execute(
                "select threshold_tok_s, ttft_p90_ceiling_s, capacity_streams, is_lower_bound, "
                "is_measured, is_threshold_of_record, first_failing_by "
                "from marts.fct_capacity_tiers"
            ).fetchall()
        }
        levels = con.execute(
            "select l.concurrency, l.median_decode_tok_s, t.ttft_p90_s "
            "from intermediate.int_levels as l join intermediate.int_level_ttft as t "
            "using (run_id, deployment, workload, concurrency) where t.kind = 'level' "
            "order by l.concurrency"
        ).fetchall()
        settings = con.execute(
            "select any_value(judgement_settings) from marts.fct_capacity_tiers"
        ).fetchone()
        record = _capacity(con)

    assert [c for c, _, _ in levels] == [1, 2, 4, 8], levels
    assert len(tiers) == len(THRESHOLDS_TOK_S) * 3, tiers
    assert [k for k, v in tiers.items() if v[3]] == [(20.0, None)]
    assert record[0] == 20.0 and record[1] == tiers[(20.0, None)][0]
    # lists stored as sorted floats, scalars as before (nights built earlier compare equal)
    assert settings is not None
    assert "; threshold_tok_s=20.0; " in settings[0]
    assert "tier_thresholds_tok_s=10.0/20.0/30.0/50.0" in settings[0]
    assert f"tier_ttft_p90_ceilings_s={TIGHT_CEILING_S}/{LOOSE_CEILING_S}" in settings[0]

    # the same night rebuilt at each threshold, as `sparkcap build --threshold T` would
    # (at 20 tok/s, the fleet's, that build is the one above)
    rebuilt: dict[float, tuple[int, bool]] = {record[0]: record[1:]}
    for threshold in (t for t in THRESHOLDS_TOK_S if t != record[0]):
        run_models(db_path, ["+fct_capacity"], {**night_vars, "threshold_tok_s": threshold})
        with duckdb.connect(str(db_path), read_only=True) as con:
            at, cap, lower = _capacity(con)
        assert at == threshold
        rebuilt[float(threshold)] = (cap, lower)
    from_tiers = {t: tiers[(t, None)][:2] for t in rebuilt}
    assert from_tiers == rebuilt
    # the night really puts a different capacity at each threshold (else equality were cheap)
    assert len({cap for cap, _ in rebuilt.values()}) == len(THRESHOLDS_TOK_S), rebuilt

    # a TTFT ceiling the higher levels exceed cuts the tier; one none comes near does not
    p90_s = {c: p90 for c, _, p90 in levels}
    assert p90_s[1] <= TIGHT_CEILING_S < p90_s[4], p90_s
    for threshold in THRESHOLDS_TOK_S:
        expected = 0
        for c, rate, p90 in levels:
            if rate < threshold or p90 > TIGHT_CEILING_S:
                break
            expected = c
        tight = tiers[(float(threshold), TIGHT_CEILING_S)]
        assert tight[0] == expected, (threshold, tight, levels)
        assert tiers[(float(threshold), LOOSE_CEILING_S)][:2] == tiers[(float(threshold), None)][:2]
    cut = tiers[(20.0, TIGHT_CEILING_S)]
    assert cut[0] < tiers[(20.0, None)][0] and cut[4] == "TTFT", cut
