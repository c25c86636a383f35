"""Every test the promises page (docs/concepts/promises.md) names exists and is selected by
`-m reliability`."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.paths import ROOT


def test_reliability_marker_selects_every_promised_test() -> None:
    page = (ROOT / "docs" / "concepts" / "promises.md").read_text(encoding="utf-8")
    promised = set(re.findall(r"`(test_\w+)`", page))
    assert len(promised) > 30
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-m",
            "reliability",
            "-p",
            "no:cacheprovider",
            str(ROOT / "tests"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        # the collection is read line by line: a -v from the caller's PYTEST_ADDOPTS would turn
        # it into a tree and hide every name
        env={**os.environ, "PYTEST_ADDOPTS": ""},
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    selected = {
        re.sub(r"\[.*\]$", "", line.split("::")[-1])
        for line in p.stdout.splitlines()
        if "::" in line
    }
    assert promised <= selected, sorted(promised - selected)
