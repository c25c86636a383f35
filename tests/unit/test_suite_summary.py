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
