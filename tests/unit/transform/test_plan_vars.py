"""``sparkcap plan``'s --mix and --long-prompts: what they mean, and what they refuse rather
than plan something else."""

from __future__ import annotations

import pytest

from sparkcap.errors import BuildError
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


def test_a_plan_input_outside_its_var_range_is_refused_naming_its_option() -> None:
    # a rate of 400 nines a minute parses to inf; a prompt of 10^14 tokens no replay can send
    nines = "9" * 400
    for mix, long_prompts, think, needle in (
        ("code=1", f"{nines}/min@1", None, "--long-prompts (plan_long_prompts_per_min): inf"),
        ("code=1", "1/min@100000000000000", None, "--long-prompts (plan_long_prompt_tokens)"),
        ("code=1", "20000/min@1k", None, "at most 10000"),
    ):
        with pytest.raises(BuildError) as caught:
            plan_vars(mix, long_prompts, 0.05, think)
        assert needle in str(caught.value), caught.value
        assert "\n" not in str(caught.value)


def test_an_option_not_given_is_no_var_so_the_plan_reads_dbts_default() -> None:
    assert plan_vars() == {}
    assert plan_vars(mix="code=0.5,prose=0.5") == {"plan_code_share": 0.5}
    assert plan_vars(long_prompts="1/min@8k") == {
        "plan_long_prompts_per_min": 1.0,
        "plan_long_prompt_tokens": 8000,
    }
    assert plan_vars(max_below_share=0.1, think_s=10) == {
        "plan_max_below_threshold_share": 0.1,
        "think_time_s": 10,
    }
