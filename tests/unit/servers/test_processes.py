"""The one helper every launched server goes through: an early exit is reported with the log's
last line, a process that never gets ready is stopped, and stop always ends the process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sparkcap.errors import ManagedProcessError
from sparkcap.servers.processes import ManagedProcess


def test_an_early_exit_names_the_last_log_line(tmp_path: Path) -> None:
    code = "import sys; print('starting'); print('bind: address in use'); sys.exit(3)"
    proc = ManagedProcess.spawn("demo server", [sys.executable, "-c", code], tmp_path / "a.log")
    with pytest.raises(ManagedProcessError, match=r"demo server exited with 3: bind: address"):
        proc.wait_until(lambda: False, timeout_s=30)


def test_never_ready_is_stopped_and_ready_returns(tmp_path: Path) -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    slow = ManagedProcess.spawn("slow", sleeper, tmp_path / "b.log")
    with pytest.raises(ManagedProcessError, match="slow not ready after 0 s"):
        slow.wait_until(lambda: False, timeout_s=0.3)
    assert slow.process.poll() is not None  # stopped, not left behind
    marker = tmp_path / "ready"
    ok = ManagedProcess.spawn(
        "ok",
        [sys.executable, "-c", f"open({str(marker)!r}, 'w'); import time; time.sleep(60)"],
        tmp_path / "c.log",
    )
    ok.wait_until(marker.exists, timeout_s=30)
    ok.stop()
    assert ok.process.poll() is not None
