"""How often does change detection flag a night that did not change? (issue 27)

Builds K flat noisy histories of N nights (the nightly histories of tests/change_nights.py:
model time, no sockets, staged through the store and judged by one dbt build), every night
drawn from the same rates, and prints the share of tested nights each subject flagged beside
the configured false alarm rate (dbt var change_false_alarm_rate). The level test's rate is
per level and night; a level flag also needs |change| >= change_min_effect_pct, so on
histories this quiet the measured share sits below the configured rate. Raise --noise to
see the effect floor at work.

    .venv/bin/python benchmarks/change_false_alarms.py --histories 20 --nights 12
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

# the history builder lives beside the tests that use it; a benchmark runs from the checkout
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparkcap.transform.dbt_build import build, known_vars
from tests.change_nights import History, Night, stage_history
from tests.support.queries import q


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=20, help="flat histories (K)")
    parser.add_argument("--nights", type=int, default=12, help="nights per history")
    parser.add_argument("--noise", type=float, default=0.01, help="sd of a trial's rate, relative")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "flat.duckdb"
        for k in range(args.histories):
            nights = [Night() for _ in range(args.nights)]
            stage_history(db, History(f"flat{k:03d}", nights, trial_noise=args.noise), args.seed)
        os.environ["DBT_INDIRECT_SELECTION"] = "cautious"  # only fct_changes' own tests
        build(db, select="+fct_changes")
        rows = q(
            db,
            "select subject, count(*) filter (where verdict not like '%not tested%'), "
            "count(*) filter (where is_change) from marts.fct_changes "
            "group by subject order by subject",
        )
    rate = float(known_vars()["change_false_alarm_rate"])
    print(f"{args.histories} flat histories x {args.nights} nights, trial noise {args.noise:.1%}")
    print(f"{'subject':<10} {'tested':>7} {'flagged':>8} {'share':>8}  configured {rate:g}")
    for subject, tested, flagged in rows:
        share = flagged / tested if tested else float("nan")
        print(f"{subject:<10} {tested:>7} {flagged:>8} {share:>8.4f}")


if __name__ == "__main__":
    main()
