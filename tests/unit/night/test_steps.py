"""A night's steps hand each stage the night's own settings."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sparkcap.night import steps


def test_validation_builds_its_frames_with_the_nights_threshold(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Validation's dbt run builds int_stream_rates: at another threshold than the night's
    build, the build after it would compute every stream rate of the run again."""
    seen: dict[str, Any] = {}

    def fake_validation(*args: Any, **kwargs: Any) -> SimpleNamespace:
        seen.update(kwargs)
        return SimpleNamespace(
            success=True, blocking_failures=[], summary_page=None, data_docs_index=None
        )

    monkeypatch.setattr(steps, "run_validation", fake_validation)
    night = SimpleNamespace(
        db_path=tmp_path / "n.duckdb",
        reports_dir=tmp_path / "reports",
        fleet=SimpleNamespace(threshold_tok_s=25.0),
        dq=None,
        require_run_id=lambda: "r1",
    )
    assert steps._validate_step(night).step == "validate"  # type: ignore[arg-type]
    assert seen["dbt_vars"] == {"threshold_tok_s": 25.0}
