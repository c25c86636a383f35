"""Servers a test starts: a free port for one, and waiting for a Prefect server to answer."""

from __future__ import annotations

import socket
import time
from pathlib import Path

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
