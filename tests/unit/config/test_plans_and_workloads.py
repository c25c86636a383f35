from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from sparkcap.config.deployment import Deployment
from sparkcap.config.plan import SweepPlan
from sparkcap.loadgen.plan import plan_waves
from sparkcap.loadgen.wave import build_body, required_tokens_for
from sparkcap.loadgen.workloads import build_streams, prompts, required_length


def test_levels_parse_and_sort() -> None:
    assert SweepPlan(levels="8,1,4").levels == (1, 4, 8)  # type: ignore[arg-type]


@pytest.mark.parametrize("levels", ["0,1", "-2", "1,1", "", "a,b"])
def test_bad_levels_rejected(levels: str) -> None:
    with pytest.raises(ValidationError):
        SweepPlan(levels=levels)  # type: ignore[arg-type]


def test_trials_bounded() -> None:
    with pytest.raises(ValidationError):
        SweepPlan(trials=6)


def test_unknown_keys_rejected() -> None:
    with pytest.raises(ValidationError):
        Deployment(name="a", endpoint="http://x/v1", model="m", nodez=2)  # type: ignore[call-arg]


def test_authorization_header_in_config_rejected() -> None:
    with pytest.raises(ValidationError, match="api_key_env"):
        Deployment(name="a", endpoint="http://x/v1", model="m", headers={"Authorization": "k"})


def test_warmup_then_trials() -> None:
    waves = plan_waves(SweepPlan(levels=(1, 2), trials=2))
    assert [(w.concurrency, w.trial) for w in waves] == [
        (1, 0),
        (1, 1),
        (1, 2),
        (2, 0),
        (2, 1),
        (2, 2),
    ]
    assert [w.trial for w in plan_waves(SweepPlan(levels=(1,), trials=1, warmup=False))] == [1]


def test_sixteen_distinct_prompts_each() -> None:
    for wl in ("code", "prose"):
        ps = prompts(wl)
        assert len(ps) == 16 and len(set(ps)) == 16


def test_prose_lengths_span_300_to_600_deterministically() -> None:
    lengths = [required_length("prose", i) for i in range(16)]
    assert min(lengths) == 300 and max(lengths) == 600
    assert lengths == [required_length("prose", i) for i in range(16)]
    assert {required_length("code", i) for i in range(16)} == {1000}


def test_prompts_distinct_beyond_sixteen_and_across_waves() -> None:
    a = build_streams("code", 40, "wave-a")
    b = build_streams("code", 40, "wave-b")
    texts_a = [s.messages[-1]["content"] for s in a]
    assert len(set(texts_a)) == 40
    assert len({s.prompt_id for s in a}) == 40
    assert not set(texts_a) & {s.messages[-1]["content"] for s in b}
    assert {s.temperature for s in a} == {0.0}
    assert {s.temperature for s in build_streams("prose", 3, "w")} == {0.7}


def test_body_asks_for_usage_and_merges_extra_body() -> None:
    spec = build_streams("code", 1, "w", max_tokens=50)[0]
    body = build_body(spec, "m", True, {"ignore_eos": True, "stream_options": {"x": 1}})
    assert body["stream"] is True and body["max_tokens"] == 50
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True, "x": 1}
    assert body["ignore_eos"] is True
    assert required_tokens_for(spec, {}) == 50
    assert required_tokens_for(spec, {"min_tokens": 20}) == 20


def test_build_var_overrides_accept_declared_numbers_only() -> None:
    from sparkcap.errors import BuildError
    from sparkcap.transform.dbt_build import known_vars, parse_var_overrides

    assert {"probe_window_s", "dip_share", "threshold_tok_s"} <= set(known_vars())
    assert parse_var_overrides(["probe_window_s=2", "dip_share=0.3"]) == {
        "probe_window_s": 2,
        "dip_share": 0.3,
    }
    assert isinstance(parse_var_overrides(["bootstrap_samples=500"])["bootstrap_samples"], int)
    # a list var (the capacity tiers): slashes on the command line, a list from the environment
    assert parse_var_overrides(["tier_thresholds_tok_s=10/25.5/40"]) == {
        "tier_thresholds_tok_s": [10, 25.5, 40]
    }
    assert parse_var_overrides(["tier_ttft_p90_ceilings_s=[2, 8]"], "SPARKCAP_DBT_VARS") == {
        "tier_ttft_p90_ceilings_s": [2, 8]
    }
    for bad, why in [
        ("tier_thresholds_tok_s=10//30", "numbers like"),
        ("tier_thresholds_tok_s=10/x", "not a number"),
        ("tier_ttft_p90_ceilings_s=5/-1", "at least 0"),
        ("probe_windows=2", "unknown dbt var"),
        ("probe_window_s", "expected NAME=NUMBER"),
        ("dip_share=half", "not a number"),
        ("dip_share=-1", "at least 0 and at most 1"),
        ("dip_share=nan", "finite"),
        ("probe_step_s=0", "greater than 0"),
        ("bootstrap_samples=200.5", "must be a whole number"),
        ("change_baseline_runs=7.5", "must be a whole number"),
    ]:
        with pytest.raises(BuildError, match=why):
            parse_var_overrides([bad])


@pytest.mark.reliability
def test_dbt_vars_from_the_environment_are_numbers_not_booleans_or_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``SPARKCAP_DBT_VARS='{"threshold_tok_s": true}'`` became a 1 tok/s threshold silently
    (pydantic's lax float takes true): the setting is refused in one line, naming the var."""
    from pydantic import ValidationError

    from sparkcap.cli_options import validation_line
    from sparkcap.settings import Settings

    for given, shown in [
        ('{"threshold_tok_s": true}', "threshold_tok_s: true"),
        ('{"threshold_tok_s": "20"}', 'threshold_tok_s: "20"'),
        ('{"tier_thresholds_tok_s": [10, false]}', "tier_thresholds_tok_s: [10, false]"),
    ]:
        monkeypatch.setenv("SPARKCAP_DBT_VARS", given)
        with pytest.raises(ValidationError) as caught:
            Settings()
        line = validation_line(caught.value)
        assert line == f"invalid SPARKCAP_DBT_VARS: {shown} is not a number or a list of numbers"
    monkeypatch.setenv("SPARKCAP_DBT_VARS", '{"threshold_tok_s": 20, "dip_share": 0.4}')
    assert Settings().dbt_vars == {"threshold_tok_s": 20, "dip_share": 0.4}


def test_probe_options_are_one_model_per_probe() -> None:
    """Fleet files (options under the probe's name), the CLI and run_probe share the models."""
    from pydantic import ValidationError

    from sparkcap.config.fleet import FleetDeployment
    from sparkcap.config.probes import OutputLengthOptions, PromptCacheOptions, probe_options

    d = FleetDeployment.model_validate(
        {
            "name": "a",
            "model": "m",
            "endpoint": "http://127.0.0.1:9/v1",
            "probes": {"prompt-cache": {"document_tokens": 100}, "output-length": None},
        }
    )
    cache = d.probes["prompt-cache"]
    assert isinstance(cache, PromptCacheOptions) and cache.document_tokens == 100
    assert cache.warm_requests == 3  # the default lives in the model only
    assert isinstance(d.probes["output-length"], OutputLengthOptions)
    assert probe_options("output-length", lengths=["20", "200"]).lengths == (20, 200)  # type: ignore[union-attr]
    with pytest.raises(ValidationError, match="warm_requets"):
        probe_options("prompt-cache", warm_requets=2)
    with pytest.raises(ValidationError):
        probe_options("mixed", code_share=1.5)


def test_sessions_on_the_command_line_are_the_fleet_files_fields() -> None:
    from sparkcap.config.command_line import parse_session_shape
    from sparkcap.config.sessions import SessionShape

    assert parse_session_shape(None, "agent") == SessionShape()
    shape = parse_session_shape(" turns=3, answer_tokens=48,think_s=0.5,reset_cache=false", "agent")
    assert (shape.turns, shape.answer_tokens, shape.think_s, shape.reset_cache) == (
        3,
        48,
        0.5,
        False,
    )
    assert shape.system_tokens == SessionShape().system_tokens  # what is not named: default


@pytest.mark.parametrize(
    ("text", "workload", "words"),
    [
        ("turns", "agent", "--sessions: 'turns' is not NAME=VALUE"),
        ("turns=", "agent", "--sessions: 'turns=' is not NAME=VALUE"),
        ("trns=3", "agent", "--sessions: unknown 'trns' (choose from turns, "),
        ("turns=3,turns=4", "agent", "--sessions: turns is given twice"),
        ("turns=65", "agent", "--sessions: turns: Input should be less than or equal to 64"),
        ("turns=x", "agent", "--sessions: turns: Input should be a valid integer"),
        ("answer_tokens=100000,turns=64", "agent", "--sessions: the shape: Value error, a session"),
        ("turns=3", "code", "--sessions shapes agent sessions; --workload code sends none"),
        ("\x1b[31m=1", "agent", "--sessions: unknown '\\x1b[31m'"),  # shown as text, escaped
    ],
)
def test_a_session_shape_that_cannot_be_taken_is_one_line_naming_the_flag(
    text: str, workload: str, words: str
) -> None:
    from sparkcap.config.command_line import parse_session_shape
    from sparkcap.errors import OptionError

    with pytest.raises(OptionError) as exc:
        parse_session_shape(text, workload)
    assert str(exc.value).startswith(words) and "\n" not in str(exc.value)


def test_the_build_log_gets_one_line_per_build_and_never_costs_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`make test` counts the suite's dbt builds and GX validations from SPARKCAP_BUILD_LOG;
    a log that cannot be written must not fail the build it notes."""
    from sparkcap.settings import note_build

    log = tmp_path / "builds.jsonl"
    monkeypatch.delenv("SPARKCAP_BUILD_LOG", raising=False)
    note_build("dbt", "build all", 1.0)  # unset: nothing, anywhere
    monkeypatch.setenv("SPARKCAP_BUILD_LOG", str(log))
    note_build("dbt", "build all", 1.23456)  # under pytest: the test that paid for it
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    note_build("gx", "validation of 3 suites", 2.0)
    notes = [json.loads(line) for line in log.read_text().splitlines()]
    this_test = "tests/unit/config/test_plans_and_workloads.py::" + (
        "test_the_build_log_gets_one_line_per_build_and_never_costs_one"
    )
    assert notes == [
        {"kind": "dbt", "what": "build all", "seconds": 1.235, "test": this_test},
        {"kind": "gx", "what": "validation of 3 suites", "seconds": 2.0},
    ]
    monkeypatch.setenv("SPARKCAP_BUILD_LOG", str(tmp_path))  # a directory: not writable as a file
    note_build("dbt", "build all", 1.0)
