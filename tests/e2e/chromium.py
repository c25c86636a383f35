"""Headless Chromium (Debian's package) as a person's browser: DOM, console and a screenshot."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--virtual-time-budget=15000",
]


@dataclass
class Rendered:
    dom: str
    console: list[str]
    screenshot: Path


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def render(page: Path, screenshot: Path, width: int = 1400, height: int = 3600) -> Rendered:
    exe = chromium()
    assert exe is not None, "chromium is not installed (.ci/run installs it)"
    url = page.resolve().as_uri()
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run(
            [
                exe,
                *FLAGS,
                f"--user-data-dir={profile}",
                "--enable-logging=stderr",
                "--v=0",
                "--dump-dom",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                exe,
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                f"--screenshot={screenshot}",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    console = [m.group(1) for m in re.finditer(r"CONSOLE[^\]]*\] (.*)", dom.stderr)]
    return Rendered(dom=dom.stdout, console=console, screenshot=screenshot)
