"""The published report, opened the way a person opens it: in a browser, from disk, offline."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparkcap.dq.offline import remote_resources
from tests.e2e.chromium import chromium, render

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHARTS = ("headline", "rates", "ttft", "throughput", "history", "prefill", "probe_ttft", "cache")


def test_report_files(twin_night: dict[str, object]) -> None:
    index = Path(str(twin_night["report"]))
    run_dir = index.parent
    assert index.name == "index.html" and run_dir.name == twin_night["run_id"]
    assert (run_dir.parent / "latest" / "index.html").exists()
    for name in CHARTS:
        png = run_dir / "charts" / f"{name}.png"
        svg = run_dir / "charts" / f"{name}.svg"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
        text = svg.read_text()
        assert text.lstrip().startswith("<svg") and text.count("<path") + text.count("<rect") > 5
    html = index.read_text()
    assert remote_resources(index) == []
    assert "≈ 28 code" in html and "≈ 11 prose" in html
    assert "not a simultaneous mixed load" in html
    # the probes from fleets/twin.yaml, stated as computed figures
    # (prompts are sized to the target within 1 %: 16,000 → 15,84x..16,16x tokens)
    assert re.search(r"one 1[56],\d{3}-token uncached prompt took [\d.]+ s", html)
    assert "losing" in html and "waited" in html
    assert re.search(r"a cached 1[12],\d{3}-token document cut TTFT from", html)
    assert "dq/summary.html" in html and "dq/data_docs/index.html" in html


@pytest.mark.skipif(chromium() is None, reason="chromium not installed (.ci/run installs it)")
def test_report_renders_in_headless_chromium(twin_night: dict[str, object]) -> None:
    index = Path(str(twin_night["report"]))
    shot = index.parent / "screenshot.png"
    page = render(index, shot)
    assert page.console == [], page.console
    for name in CHARTS:
        m = re.search(
            rf'<div id="chart-{name}"[^>]*>(.*?)</div>\s*(?:<table|</section>|<p)', page.dom, re.S
        )
        assert m is not None, name
        assert "<svg" in m.group(1) or "<canvas" in m.group(1), name
    assert shot.exists() and shot.stat().st_size > 50_000


@pytest.mark.skipif(chromium() is None, reason="chromium not installed (.ci/run installs it)")
def test_data_docs_open_offline_in_chromium(twin_night: dict[str, object]) -> None:
    run_dir = Path(str(twin_night["report"])).parent
    docs = run_dir / "dq" / "data_docs" / "index.html"
    pages = [docs, *sorted((docs.parent / "validations").rglob("*.html"))[:2]]
    for i, p in enumerate(pages):
        assert remote_resources(p) == [], p
        page = render(p, run_dir / "dq" / f"screenshot-{i}.png")
        assert "Expectation" in page.dom
        assert page.console == [], (p, page.console)
