"""Rows of the marts as the readers return them, for the wording tests: one row builder per
mart, its defaults a plain measured case a test overrides field by field."""

from __future__ import annotations

from sparkcap.publish.marts import CapacityRow


def capacity(verdict: str, *, measured: bool = True, **kw: object) -> CapacityRow:
    row = {
        "deployment": "glm",
        "workload": "code",
        "threshold_tok_s": 20.0,
        "capacity_streams": 4,
        "is_lower_bound": False,
        "is_below_lowest_level": False,
        "first_failing_level": 8,
        "method": "grid",
        "level_capacity_streams": 4,
        "search_low_streams": None,
        "search_high_streams": None,
        "n_straddling_levels": 0,
        "sustain_result": "not run (grid)",
        "is_measured": measured,
        "capacity_verdict": verdict,
        "capacity_interpolated_streams": 4,
        "n_valid_trials": 6,
    }
    row.update(kw)
    return CapacityRow(**row)  # type: ignore[arg-type]
