"""Capacity tiers from one night's stored streams, no new wave.

One grid night at 1, 2, 4 and 8 streams, staged in model time (``tests/change_nights.py``,
no noise), whose median rates (55, 39, 25 and 15 tok/s) put a different capacity at each of
10, 20, 30 and 50 tok/s, and whose TTFT grows with the level (0.08 s at one stream, 0.6 s at
eight). Built once at the fleet's 20 tok/s, marts.fct_capacity_tiers must hold, at each
threshold T, the capacity that a build at `threshold_tok_s = T` (what `sparkcap build
--threshold T` passes) puts into marts.fct_capacity; and a TTFT ceiling the higher levels
exceed must cut the tier.

The test is about the marts, so the night is staged, not swept: a live sweep of the simulator
(one trial a level) puts level 1 at ~55 tok/s against the 50 tok/s tier and level 1's TTFT at
~0.08 s against the 0.25 s ceiling, where a stalled client could read either on the other
side.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from sparkcap.transform.dbt_build import run_models
from tests.change_nights import History, Night, stage_history

pytestmark = [pytest.mark.integration]

RATES_TOK_S = {1: 55.0, 2: 39.0, 4: 25.0, 8: 15.0}
TTFT_S = {1: 0.08, 2: 0.15, 4: 0.35, 8: 0.6}
THRESHOLDS_TOK_S = (10, 20, 30, 50)
TIGHT_CEILING_S = 0.25  # between the TTFT p90 at two streams and at four
LOOSE_CEILING_S = 60.0  # no level comes near it
# the capacity at each threshold, and with the tight ceiling (4 streams' TTFT exceeds it)
EXPECTED = {10: 8, 20: 4, 30: 2, 50: 1}
EXPECTED_TIGHT = {10: 2, 20: 2, 30: 2, 50: 1}


def _capacity(con: duckdb.DuckDBPyConnection) -> tuple[float, int, bool]:
    row = con.execute(
        "select threshold_tok_s, capacity_streams, is_lower_bound from marts.fct_capacity"
    ).fetchall()
    assert len(row) == 1, row
    return float(row[0][0]), int(row[0][1]), bool(row[0][2])


def test_tiers_are_the_capacity_a_build_at_each_threshold_reports(db_path: Path) -> None:
    stage_history(db_path, History.exact("m", [Night()], RATES_TOK_S, TTFT_S), seed=0)

    night_vars = {
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

    # the marts read the staged night as staged: each level's rate and TTFT p90
    assert [(c, round(r, 6), round(p90, 6)) for c, r, p90 in levels] == [
        (c, RATES_TOK_S[c], TTFT_S[c]) for c in (1, 2, 4, 8)
    ], levels
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
    # the night really puts a different capacity at each threshold (else equality were cheap);
    # 8 streams, the grid's top, still holds 10 tok/s: a lower bound
    assert rebuilt == {float(t): (c, c == 8) for t, c in EXPECTED.items()}, rebuilt

    # a TTFT ceiling the higher levels exceed cuts the tier; one none comes near does not
    for threshold in THRESHOLDS_TOK_S:
        tight = tiers[(float(threshold), TIGHT_CEILING_S)]
        assert tight[0] == EXPECTED_TIGHT[threshold], (threshold, tight, levels)
        assert tiers[(float(threshold), LOOSE_CEILING_S)][:2] == tiers[(float(threshold), None)][:2]
    cut = tiers[(20.0, TIGHT_CEILING_S)]
    assert cut[0] < tiers[(20.0, None)][0] and cut[4] == "TTFT", cut
