"""Change detection over nightly histories: staged through the store, judged by dbt.

Three histories of twelve nights in one warehouse and one build (tests/change_nights.py, model
time, no sockets): ``d`` 8 % slower from night 8, when its engine went from sim-1 to sim-2, with
a client-starved (and slow) night 5; ``drift`` 0.5 % slower every night; ``flat`` noise only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkcap.publish.compare import regressions
from sparkcap.transform.dbt_build import (
    WHOLE_NUMBER_VARS,
    build,
    known_vars,
    parse_var_overrides,
    var_refusal,
)
from tests.change_nights import History, Night, run_id_for, stage_history
from tests.support.queries import copy_of, q

NIGHTS = range(1, 13)


@pytest.fixture(scope="module")
def history_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("changes")
    db_path = base / "changes.duckdb"
    step = [
        Night(
            speed=0.92 if n >= 8 else (0.7 if n == 5 else 1.0),
            starved=n == 5,
            engine_version="sim-2" if n >= 8 else "sim-1",
        )
        for n in NIGHTS
    ]
    with pytest.MonkeyPatch.context() as mp:  # for this fixture only: no later test inherits it
        mp.setenv("SPARKCAP_HOME", str(base / "home"))
        stage_history(db_path, History("d", step), seed=27)
        drifting = [Night(speed=1 - 0.005 * (n - 1)) for n in NIGHTS]
        far_from_threshold = {1: 80.0, 2: 60.0, 4: 40.0, 8: 30.0}  # its capacity never moves
        smooth = History(
            "drift", drifting, far_from_threshold, trial_noise=0.003, stream_spread=0.005
        )
        stage_history(db_path, smooth, seed=27)
        flat = History("flat", [Night() for _ in NIGHTS], levels=(4,))
        stage_history(db_path, flat, seed=27)
        # only what fct_changes needs, and only the tests of those models
        mp.setenv("DBT_INDIRECT_SELECTION", "cautious")
        build(db_path, select="+fct_changes")
    yield db_path


def changes(db: Path, deployment: str) -> list[tuple[int, str, int | None, bool, str | None, str]]:
    """(night, subject, concurrency, is_change, what_else_changed, verdict) in night order."""
    rows = q(
        db,
        "select run_id, subject, concurrency, is_change, what_else_changed, verdict "
        "from marts.fct_changes where deployment = ? order by run_id, subject, concurrency",
        [deployment],
    )
    night = {run_id_for(deployment, n): n for n in NIGHTS}
    return [(night[r[0]], r[1], r[2], r[3], r[4], r[5]) for r in rows]


def test_a_slowdown_is_flagged_from_its_night_on_and_a_starved_night_never(
    history_db: Path,
) -> None:
    rows = changes(history_db, "d")
    flagged = {(n, s, c) for n, s, c, is_change, _, _ in rows if is_change}
    levels = {(n, "level", c) for n in range(8, 13) for c in (1, 2, 4, 8)}
    capacity = {(n, "capacity", None) for n in range(8, 13)}  # 4 streams → 2 from night 8
    # every level and the capacity from night 8 on, nothing before it; the drift test reads
    # the step as a slope once most of its window is past it, which is true, and allowed
    assert {f for f in flagged if f[1] != "drift"} == levels | capacity
    assert all(n >= 11 for n, s, _ in flagged if s == "drift")
    starved = [r for r in rows if r[0] == 5]
    assert starved and not any(r[3] for r in starved)
    assert all("no valid trial" in r[5] for r in starved if r[1] == "level")
    assert all("client timing" in r[5] for r in starved if r[1] != "drift")
    # the engine change is named beside the change it explains, on that night only
    night8 = [r for r in rows if r[0] == 8 and r[1] in ("level", "capacity")]
    assert all(r[4] == "engine_version sim-1 → sim-2" for r in night8)
    assert all("engine_version sim-1 → sim-2" in r[5] for r in night8)
    assert all(r[4] is None for r in rows if r[0] != 8)
    # the size and the confidence are stated, and a lasting change says since when
    first = next(r[5] for r in night8 if r[2] == 4)
    assert " % slower at 4 streams" in first and "< 0.01 false alarm rate" in first
    lasting = next(r[5] for r in rows if r[0] == 12 and r[2] == 4)
    assert lasting.startswith("still ") and f"before {run_id_for('d', 8)}" in lasting


def test_a_steady_drift_is_flagged_within_its_window_and_no_single_night_is(
    history_db: Path,
) -> None:
    rows = changes(history_db, "drift")
    drift = {r[0]: r for r in rows if r[1] == "drift"}
    flagged = sorted(n for n, r in drift.items() if r[3])
    assert flagged and flagged[0] <= 10  # within the ten-run window
    assert flagged == list(range(flagged[0], 13))  # and from then on
    assert "drift slower: -0.5" in drift[12][5]
    assert not any(r[3] for r in rows if r[1] != "drift")  # no level or capacity alarm
    # flat noisy nights: no change of any kind, on any night
    assert not any(r[3] for r in changes(history_db, "flat"))


def _overrides(whole: bool) -> list[str]:
    """Every numeric var of the project as ``NAME=VALUE``: a whole number (a share as 0 or 1,
    the rest rounded) or a decimal (counts stay whole: a decimal count is refused up front)."""
    out = []
    for name, default in known_vars().items():
        if isinstance(default, list | bool):
            continue
        if whole:
            # the whole number nearest the default that the var's range admits (a quantile
            # below 1 admits none: it is left out)
            first = [0, 1] if name == "ci_low_pct" else [1, 0]
            tried = first if 0 < default < 1 else [round(default)]
            fits = [v for v in tried if var_refusal(name, v) is None]
            if not fits:
                continue
            value = fits[0]
        elif isinstance(default, int):
            if name in WHOLE_NUMBER_VARS:
                continue
            value = default + 0.5
        else:
            value = default
        out.append(f"{name}={value}")
    return out


@pytest.mark.reliability
@pytest.mark.parametrize("whole", [True, False], ids=["whole", "decimal"])
def test_every_numeric_var_builds_given_as_a_whole_number_or_a_decimal(
    history_db: Path, tmp_path: Path, whole: bool
) -> None:
    """``--var change_min_effect_pct=10`` broke int_change_levels (printf's %g refuses an
    integer) and skipped fct_changes: every model that formats a var casts it. The history's
    verdicts format the change, drift and timing vars. Whole numbers build the whole night;
    decimals (most defaults are, and every other build of the suite uses them) build the
    change models, where the broken formats were."""
    db = copy_of(history_db, tmp_path)
    given = _overrides(whole)
    assert len(given) > 20 if whole else len(given) > 15
    select = None if whole else "int_change_levels int_change_drift int_change_capacity fct_changes"
    result = build(db, select=select, dbt_vars=parse_var_overrides(given))
    assert result.success, result.failures
    verdicts = [r[0] for r in q(db, "select verdict from marts.fct_changes")]
    assert verdicts and all(verdicts)
    if whole:  # the var as the verdict states it, not 10.0 or 1e+01
        assert any("|change| >= 3 %" in v for v in verdicts), verdicts[:3]


def test_a_regression_gate_says_what_else_changed_once(history_db: Path) -> None:
    """The gate's line was the verdict (which ends with what else changed) and then
    "(also changed: …)" again."""
    found = regressions(history_db, run_id_for("d", 7), run_id_for("d", 8))
    changed = [r.words for r in found if "engine_version sim-1 → sim-2" in r.words]
    assert changed, [r.words for r in found]
    for words in changed:
        assert words.count("engine_version sim-1 → sim-2") == 1, words
        assert "also changed" not in words
