"""Where the simulator runs: :class:`SimServer` serves the app (``sim.routes``) on loopback
from a background thread of this process; :class:`SimProcess` runs the twin fleet in a child
process (``python -m sparkcap.servers.sim``), so that its work never shares an interpreter
lock with the client's timestamps.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import uvicorn

from sparkcap.errors import ManagedProcessError
from sparkcap.servers.processes import ManagedProcess, OnLoopback
from sparkcap.servers.sim.profile import SimProfile
from sparkcap.servers.sim.routes import create_app
from sparkcap.settings import get_settings


class SimServer(OnLoopback):
    """The simulator on 127.0.0.1, in a background thread with its own event loop."""

    def __init__(
        self,
        profiles: Iterable[SimProfile],
        port: int = 0,
        ssl_certfile: Path | None = None,
        ssl_keyfile: Path | None = None,
        required_api_key: str | None = None,
        required_headers: Mapping[str, str] | None = None,
    ) -> None:
        self.app = create_app(profiles, required_api_key, required_headers)
        self.scheme = "https" if ssl_certfile else "http"
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self.port: int = self._sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            # never dictConfig the process's logging: that closes and flushes the handlers of
            # whatever hosts the simulator, and a handler's flush racing its host's own
            # threads (a Prefect API log handler) can deadlock the host
            log_config=None,
            log_level="critical",
            lifespan="off",
            access_log=False,
            timeout_keep_alive=120,
            ssl_certfile=str(ssl_certfile) if ssl_certfile else None,
            ssl_keyfile=str(ssl_keyfile) if ssl_keyfile else None,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    def start(self, timeout_s: float = 10.0) -> SimServer:
        self.app.state.started_at_s = time.time()
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("simulator did not start")
            time.sleep(0.01)
        return self

    def serve_forever(self) -> None:
        self._server.run(sockets=[self._sock])

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._sock.close()

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class SimProcess:
    """The twin fleet in a child process (``python -m sparkcap.servers.sim``), on a free port."""

    def __init__(self, overrides: dict[str, Any] | None = None) -> None:
        self.overrides = overrides or {}
        self.proc: Any = None
        self.managed: ManagedProcess | None = None
        self.log_path: Path | None = None
        self.endpoint = ""
        self.base_url = ""

    def start(self, timeout_s: float = 30.0) -> SimProcess:
        """Start the child with its output in a log file (a full pipe would block it)."""
        import sys
        import tempfile

        logs = get_settings().work_dir / "logs"
        ready = Path(tempfile.mkdtemp(prefix="sparkcap-sim-")) / "ready.json"
        self.managed = ManagedProcess.spawn(
            "simulator process",
            [
                sys.executable,
                "-m",
                "sparkcap.servers.sim",
                "0",
                json.dumps(self.overrides),
                str(ready),
            ],
            logs / f"sim-{os.getpid()}-{time.time_ns()}.log",
        )
        self.proc, self.log_path = self.managed.process, self.managed.log_path
        started = time.monotonic()
        try:
            self.managed.wait_until(ready.exists, timeout_s, poll_s=0.02)
            info = json.loads(ready.read_text(encoding="utf-8"))
            ready.unlink()
            ready.parent.rmdir()
            self.endpoint = info["endpoint"]
            self.base_url = self.endpoint.removesuffix("/v1")
            left = max(1.0, timeout_s - (time.monotonic() - started))
            self.managed.wait_healthy(self.base_url + "/health", left)
        except ManagedProcessError as exc:
            self.stop()
            raise RuntimeError(f"simulator did not start: {exc}") from None
        return self

    def stop(self) -> None:
        if self.managed is not None:
            self.managed.stop()

    def __enter__(self) -> SimProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
