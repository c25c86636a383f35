"""Processes sparkcap starts for a run (llama-server, the simulator) and always stops.

One helper for what every launched server needs: output into a log file (a full pipe would
block the child), a readiness wait that notices an early exit and says why with the log's
last line, and a stop that escalates from SIGTERM to SIGKILL.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from sparkcap.errors import ManagedProcessError


class OnLoopback:
    """A server sparkcap started on 127.0.0.1 at ``port``: its base URL, and its
    OpenAI-compatible endpoint under ``/v1``."""

    port: int
    scheme: str = "http"

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def endpoint(self) -> str:
        return f"{self.base_url}/v1"


@dataclass
class ManagedProcess:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @classmethod
    def spawn(
        cls, name: str, args: Sequence[str], log_path: Path, *, new_session: bool = False
    ) -> ManagedProcess:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                list(args), stdout=log, stderr=subprocess.STDOUT, start_new_session=new_session
            )
        return cls(name, proc, log_path)

    def last_log_line(self) -> str:
        try:
            tail = self.log_path.read_text(errors="replace").strip().splitlines()[-1:]
        except OSError:
            tail = []
        return tail[0] if tail else "no output"

    def wait_until(self, ready: Callable[[], bool], timeout_s: float, poll_s: float = 0.05) -> None:
        """Wait for ``ready()``; an exit or the deadline stops the process and raises."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ManagedProcessError(
                    f"{self.name} exited with {self.process.returncode}: {self.last_log_line()}"
                )
            if ready():
                return
            time.sleep(poll_s)
        self.stop()
        raise ManagedProcessError(f"{self.name} not ready after {timeout_s:.0f} s")

    def wait_healthy(self, url: str, timeout_s: float) -> None:
        def healthy() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(url, timeout=2.0).status_code == 200
            return False

        self.wait_until(healthy, timeout_s, poll_s=0.25)

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout_s)
