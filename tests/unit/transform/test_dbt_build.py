"""The judgement settings dbt stores on its rows cover every var the project declares; the
parse a process keeps is keyed by what a parse depends on."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from sparkcap.transform import dbt_build
from tests.paths import ROOT


def test_every_dbt_var_is_part_of_the_stored_judgement_settings() -> None:
    """A var missing from judgement_var_names() could change a capacity without the nights
    already built being rebuilt: history would mix settings silently."""
    vars_ = yaml.safe_load((ROOT / "dbt" / "dbt_project.yml").read_text())["vars"]
    macro = (ROOT / "dbt" / "macros" / "judgement_settings.sql").read_text()
    listed = re.search(r"return\(\[(.*?)\]\)", macro, re.S)
    assert listed is not None
    # the plan's inputs (sparkcap plan --mix …) are read only by the plan's models, tables
    # rebuilt whole by every build that selects them: no stored row depends on them
    plan_vars = {v for v in vars_ if v.startswith("plan_")}
    assert sorted(re.findall(r"'(\w+)'", listed.group(1))) == sorted(set(vars_) - plan_vars)
    for sql in (ROOT / "dbt").rglob("*.sql"):
        read = {v for v in plan_vars if f"var('{v}')" in sql.read_text()}
        assert not read or sql.parent.name == "plan", (sql, read)


def test_a_parsed_manifest_is_reused_only_for_the_same_project_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The in-process manifest must go stale the moment a model is edited, and must not change
    with the warehouse (the profile attaches it under a fixed name) or the vars (each
    invocation compiles with its own)."""
    project = tmp_path / "dbt"
    (project / "models").mkdir(parents=True)
    model = project / "models" / "m.sql"
    model.write_text("select 1 as x\n")
    monkeypatch.setattr(dbt_build, "dbt_project_dir", lambda: project)
    args = ["build", "--vars", '{"threshold_tok_s": 20}']
    first = dbt_build._manifest_key(args)
    assert dbt_build._manifest_key(list(args)) == first
    # a different warehouse is not a different parse
    assert dbt_build._manifest_key([*args, "--target-path", "/elsewhere"]) == first
    assert dbt_build._manifest_key(["build", "--vars", '{"threshold_tok_s": 30}']) == first
    model.write_text("select 2 as x\n")
    os.utime(model, ns=(1, 1))
    assert dbt_build._manifest_key(args) != first


def test_node_selection_and_vars_are_left_out_of_the_parse() -> None:
    args = ["--project-dir", "p", "--select", "a", "b", "--indirect-selection", "cautious"]
    args += ["--exclude", "test_type:unit", "--full-refresh", "--vars", '{"a": 1}', "--quiet"]
    assert dbt_build._parse_arguments(args) == ["--project-dir", "p", "--quiet"]


VAR_CALL = re.compile(r"(?<![\w.])var\(")  # dbt's var(), not env_var()


def _var_calls_in_properties(node: object, where: str) -> list[str]:
    if isinstance(node, dict):
        return [
            hit
            for key, value in node.items()
            if key != "description"  # prose, never rendered into the manifest's structure
            for hit in _var_calls_in_properties(value, f"{where}.{key}")
        ]
    if isinstance(node, list):
        return [h for i, v in enumerate(node) for h in _var_calls_in_properties(v, f"{where}[{i}]")]
    return [where] if isinstance(node, str) and VAR_CALL.search(node) else []


def test_no_var_decides_what_the_parse_stores() -> None:
    """One parsed manifest serves every invocation's vars (``_manifest_key``): that holds while
    vars are read only where a node is compiled. A var in a ``config()``, a property file (a
    test's arguments, a model's config) or dbt_project.yml's configs would be rendered into
    the manifest at parse time, and a build with other vars would run the first parse's."""
    project = ROOT / "dbt"
    found: list[str] = []
    for sql in project.rglob("*.sql"):
        if "target" in sql.relative_to(project).parts:
            continue
        for block in re.findall(r"\{\{\s*config\((.*?)\)\s*\}\}", sql.read_text(), re.S):
            if VAR_CALL.search(block):
                found.append(str(sql.relative_to(project)))
    for yml in project.rglob("*.yml"):
        if "target" in yml.relative_to(project).parts or yml.name == "profiles.yml":
            continue
        doc = yaml.safe_load(yml.read_text())
        if yml.name == "dbt_project.yml":
            doc = {k: v for k, v in doc.items() if k != "vars"}  # the defaults themselves
        found += _var_calls_in_properties(doc, str(yml.relative_to(project)))
    assert found == []
    # the check sees what it looks for
    assert _var_calls_in_properties({"tests": [{"accepted_values": "{{ var('x') }}"}]}, "t")
    assert not _var_calls_in_properties({"x": "{{ env_var('X') }}"}, "t")


def test_the_key_changes_with_the_adapters_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manifest kept on disk outlives the process that parsed it: one parsed with another
    dbt-duckdb holds that adapter's macros."""
    import importlib.metadata

    monkeypatch.setattr(dbt_build, "dbt_project_dir", lambda: tmp_path)
    args = ["build"]
    first = dbt_build._manifest_key(args)
    real = importlib.metadata.version

    def other_duckdb_adapter(name: str) -> str:
        return "0.0.1" if name == "dbt-duckdb" else real(name)

    monkeypatch.setattr(importlib.metadata, "version", other_duckdb_adapter)
    assert dbt_build._manifest_key(args) != first


def test_a_parse_is_kept_for_the_next_process_and_a_damaged_one_is_parsed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dbt.contracts.graph.manifest import Manifest

    from sparkcap.settings import get_settings

    monkeypatch.setenv("SPARKCAP_CACHE", str(tmp_path / "cache"))
    dbt_build._store_manifest("k" * 64, Manifest())
    path = get_settings().cache_dir / "dbt-manifests" / f"{'k' * 64}.msgpack"
    assert path.exists() and not list(path.parent.glob("*.partial"))
    assert isinstance(dbt_build._stored_manifest("k" * 64), Manifest)
    assert dbt_build._stored_manifest("n" * 64) is None
    path.write_bytes(b"\x93 not a manifest")
    assert dbt_build._stored_manifest("k" * 64) is None
    # a cache that cannot be written costs a parse, never the build
    monkeypatch.setenv("SPARKCAP_CACHE", str(path))  # a file where a folder should be
    dbt_build._store_manifest("k" * 64, Manifest())


@pytest.mark.reliability
def test_every_numeric_var_has_a_range_and_one_outside_it_is_refused_by_name() -> None:
    """A count's ceiling bounds the memory every build takes; a share is within 0..1; a
    threshold of 0 or below would pass every level."""
    numeric = {k for k, v in dbt_build.known_vars().items() if not isinstance(v, bool)}
    assert set(dbt_build.VAR_LIMITS) == numeric
    for name, default in dbt_build.known_vars().items():  # the defaults are values
        assert dbt_build.var_refusal(name, default) is None if not isinstance(default, list) \
            else all(dbt_build.var_refusal(name, d) is None for d in default), name  # fmt: skip
    for item, needle in (
        ("threshold_tok_s=-5", "must be greater than 0"),
        ("threshold_tok_s=0", "must be greater than 0"),
        ("threshold_tok_s=nan", "finite"),
        ("threshold_tok_s=inf", "finite"),
        ("threshold_tok_s=1e308", "at most 100000"),
        ("plan_code_share=2", "at most 1"),
        ("ttft_quantile=1", "below 1"),
        ("replay_warmup_share=1", "at most 0.9"),
        ("bootstrap_samples=1e9", "at most 10000"),
        ("plan_max_servers=99999", "at most 64"),
        ("change_permutations=10000000", "at most 100000"),
        ("drift_window_runs=100000", "at most 365"),
        ("plan_long_prompt_tokens=1e14", "at most 1e+07"),
        ("open_loop_grid_points=1e6", "at most 5000"),
    ):
        with pytest.raises(dbt_build.BuildError) as caught:
            dbt_build.parse_var_overrides([item])
        words = str(caught.value)
        assert words.startswith(f"--var {item.split('=')[0]}: ") and needle in words, words
    # vars a build receives from elsewhere (sparkcap plan, --threshold) are checked too, and
    # so are the pairs that must be ordered
    with pytest.raises(dbt_build.BuildError, match=r"ci_low_pct: 0\.9 must not exceed ci_high_pct"):
        dbt_build.check_vars({"ci_low_pct": 0.9, "ci_high_pct": 0.1})
    with pytest.raises(dbt_build.BuildError, match="bootstrap_samples"):
        dbt_build.dbt_args("build", Path("w.duckdb"), dbt_vars={"bootstrap_samples": 10**9})
