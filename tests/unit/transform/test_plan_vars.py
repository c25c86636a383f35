"""``sparkcap plan``'s --mix and --long-prompts: what they mean, and what they refuse rather
than plan something else."""

from __future__ import annotations

import pytest

from sparkcap.transform.dbt_build import BuildError
from sparkcap.transform.plan_vars import parse_long_prompts, parse_mix, plan_vars


def test_mix_and_long_prompt_parsing() -> None:
    assert parse_mix("code=0.7,prose=0.3") == 0.7 and parse_mix("prose=1") == 0.0
    assert parse_long_prompts("2/min@32k") == (2.0, 32000)
    assert parse_long_prompts("30/h@8000") == (0.5, 8000) and parse_long_prompts("0") == (0, 0)
    for bad in ("code=0.7,code=0.3", "code=x,prose=1", "code=1.5,prose=-0.5", "code=nan"):
        with pytest.raises(BuildError):
            parse_mix(bad)
    for bad in ("2/min@", "2/s@32k", "-1/min@8k", "2/min@0.5"):
        with pytest.raises(BuildError):
            parse_long_prompts(bad)
    with pytest.raises(BuildError, match="max-below-share"):
        plan_vars("code=1", "0", 0)
    assert "plan_long_prompt_tokens" not in plan_vars("code=1", "0", 0.05)
