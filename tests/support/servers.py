"""Servers and other processes a test starts: a free port for one, waiting for a Prefect server
to answer, stopping a process group it started, a Python child that holds something."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest


def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on (for a server that takes a fixed port)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_prefect_api(api: str, log: Path, timeout_s: float) -> None:
    """Until a ``prefect server`` started in a test answers its health check; a server that
    never does fails the test with the tail of its log."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail("prefect server did not start: " + log.read_text(errors="replace")[-3000:])


def stop_process_group(proc: subprocess.Popen[Any] | None) -> None:
    """Stop the process group ``proc`` leads (started with ``start_new_session=True``), if it
    still runs: SIGTERM, then SIGKILL after 20 s, reaped either way (a loaded machine may
    take that long to let a server's workers go)."""
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)


@contextlib.contextmanager
def python_child(code: str, ready: str) -> Iterator[subprocess.Popen[str]]:
    """``python -c CODE`` in a child process, entered once the child has printed ``ready`` as
    its first line (what it holds, it holds by then): for what another process does to the
    code under test. Killed, if still running, and reaped on leaving."""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == ready
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
