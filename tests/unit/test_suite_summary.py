"""The end of `make test` names the tests that pay for whole builds: a count alone does not
say where to cut."""

from __future__ import annotations

import json
from pathlib import Path

from tests.suite_summary import summary


def test_the_summary_counts_builds_and_names_the_tests_that_run_them(tmp_path: Path) -> None:
    log = tmp_path / "builds.jsonl"
    notes = [
        {"kind": "dbt", "what": "build all", "seconds": 10, "test": "tests/a.py::t1"},
        {"kind": "dbt", "what": "build all", "seconds": 12, "test": "tests/a.py::t1"},
        {"kind": "dbt", "what": "run selected", "seconds": 2, "test": "tests/b.py::t2"},
        {"kind": "gx", "what": "validate", "seconds": 5, "test": "tests/b.py::t2"},
        {"kind": "dbt", "what": "build all", "seconds": 9},
    ]
    log.write_text("\n".join(json.dumps(n) for n in notes) + "\nnot json\n", encoding="utf-8")
    out = summary(log, 60, 600, 120, 450, 610)
    assert out[0].endswith("610 s in all (10 min 10 s)")
    assert "lint done at 60 s" in out[0] and "client-timing tests at 120 s" in out[0]
    assert "real-server tests at 450 s" in out[0] and "tests in parallel at 600 s" in out[0]
    assert out[1].startswith("builds: 3 whole dbt builds, 1 GX validations")
    assert any("1 × unreadable note" in line for line in out)
    ranked = out[out.index("the tests that run most whole builds and validations:") + 1 :]
    assert ranked[0].split() == ["2", "tests/a.py::t1"]
    assert sorted(line.split()[1] for line in ranked[1:]) == ["(outside", "tests/b.py::t2"]


def test_the_summary_gives_each_parts_cpu_and_the_costliest_tests(tmp_path: Path) -> None:
    log, logs = tmp_path / "builds.jsonl", tmp_path / "logs"
    logs.mkdir()
    notes = [
        {"kind": "dbt", "what": "build all", "seconds": 20, "cpu_s": 9.5, "test": "t::a"},
        {
            "kind": "test",
            "what": "cpu",
            "test": "t::a",
            "seconds": 60,
            "cpu_s": 30,
            "children_cpu_s": 12.5,
        },
        {
            "kind": "test",
            "what": "cpu",
            "test": "t::b",
            "seconds": 70,
            "cpu_s": 50,
            "children_cpu_s": 0,
        },
    ]
    log.write_text("\n".join(json.dumps(n) for n in notes) + "\n", encoding="utf-8")
    # a POSIX shell's `times`: the shell's own, then its children's user and system seconds
    (logs / "lint.cpu").write_text("0m0.01s 0m0.00s\n1m30.50s 0m4.50s\n", encoding="utf-8")
    (logs / "parallel.cpu").write_text("0m0.000000s 0m0.000000s\n20m0.0s 1m0.0s\n")
    (logs / "timing.cpu").write_text("garbled\n")  # unreadable: left out, never a failure
    out = summary(log, 60, 600, 120, 450, 610, logs)
    assert "CPU seconds by part: lint 95 · tests in parallel 1260 · 1355 in all" in out
    assert out[2].startswith("builds: 1 whole dbt builds")  # test notes are not builds
    assert any("9.5 CPU-s" in line for line in out)
    ranked = out[next(i for i, line in enumerate(out) if "cost most CPU" in line) + 1 :]
    assert [line.split() for line in ranked] == [["50.0", "50.0", "t::b"], ["42.5", "30.0", "t::a"]]
    assert "92 CPU-s over 2 tests" in out[-3]
