"""One wave spread over several load-generating processes, released at one instant.

Why: one Python event loop stamps chunk arrivals one at a time, so when a synchronized wave's
streams all receive a chunk in the same instant (a server's batched decode step does exactly
that) the last one stamped is late by the time the loop spent on the others. At a few hundred
streams that lateness biases rates and the release itself grows ragged. Several processes
each carry a share of the streams, with their own loop and connections.

Synchronization needs no clock exchange: on Linux ``perf_counter_ns`` is CLOCK_MONOTONIC, one
clock for every process of the host. Each process parks its streams at a gate, reports
ready, and is given one release instant a few milliseconds ahead; every process records its
streams exactly as the in-process path does, against the wave's one anchor, so raw rows keep
their shape. What each process saw of its own loop comes back as a :class:`ProcessTiming`.

Workers are started once per sweep (fresh interpreters, safe from threaded parents such as
Prefect's task runners) and keep their connections across the sweep's waves, as the in-process
client does. A worker that dies fails the sweep with a clear error, never a half-read wave.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from sparkcap.config.deployment import Deployment
from sparkcap.errors import ClientProcessError
from sparkcap.loadgen.arrivals import new_event_loop
from sparkcap.loadgen.connections import StreamClients
from sparkcap.loadgen.records import ProcessTiming, RequestRecord, WaveRecord
from sparkcap.loadgen.wave import WaveTarget, prepare_streams, release_streams, settle_wave
from sparkcap.loadgen.workloads import StreamSpec

# Lead between "every process is parked" and the release: enough for a pipe write to wake each
# worker's loop (tens of µs idle, milliseconds on a loaded machine). A worker that still gets
# the instant late starts late, and the wave's start skew says so.
RELEASE_LEAD_NS = 20_000_000
START_TIMEOUT_S = 60.0


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(slots=True)
class _Share:
    url: str
    bodies: list[bytes]
    headers: list[dict[str, str]]
    records: list[RequestRecord]
    anchor_perf_ns: int
    total_timeout_s: float


async def _recv(conn: Connection) -> Any:
    """Await a message without a thread: the pipe's fd is watched by this loop."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def _on_readable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(conn.fileno(), _on_readable)
    try:
        await ready
    finally:
        loop.remove_reader(conn.fileno())
    return conn.recv()


async def _serve(conn: Connection, deployment: Deployment, index: int) -> None:
    async with StreamClients(deployment) as clients:
        gc.freeze()  # what start-up made lives for good: later collections skip it
        conn.send(("up", os.getpid()))
        while True:
            msg = await _recv(conn)
            if msg is None:
                return
            share: _Share = msg

            async def gate() -> int:
                conn.send(("ready", None))
                kind, release_ns = await _recv(conn)
                if kind != "go":
                    raise ClientProcessError(f"expected the release instant, got {kind!r}")
                return int(release_ns)

            timing = await release_streams(
                clients,
                url=share.url,
                bodies=share.bodies,
                headers=share.headers,
                records=share.records,
                anchor_perf_ns=share.anchor_perf_ns,
                total_timeout_s=share.total_timeout_s,
                process_index=index,
                release_gate=gate,
            )
            conn.send(("done", (share.records, timing)))
            gc.collect()  # between waves, where no stream is being timed


def _worker_main(fd: int, index: int) -> None:
    # the parent owns Ctrl-C: it stops the workers; a worker dying on its own would lose streams
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(fd)
    with contextlib.suppress(EOFError, BrokenPipeError, ConnectionResetError):
        deployment = conn.recv()
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            runner.run(_serve(conn, deployment, index))


class ClientPool:
    """``n`` worker processes that run waves for one deployment; use with ``async with``."""

    def __init__(
        self, deployment: Deployment, n_processes: int, min_streams_per_process: int = 16
    ) -> None:
        if n_processes < 1:
            raise ValueError("a pool needs at least one process")
        self.deployment = deployment
        self.n_processes = n_processes
        self.min_streams_per_process = min_streams_per_process
        self._procs: list[Any] = []
        self._conns: list[Connection] = []

    async def __aenter__(self) -> ClientPool:
        # A plain ``python -m`` child, not multiprocessing's spawn: spawn re-imports the
        # caller's main module, which breaks any script or notebook without a main guard.
        try:
            for i in range(self.n_processes):
                mine, theirs = socket.socketpair()
                proc = subprocess.Popen(
                    [sys.executable, "-m", "sparkcap.loadgen.procs", str(theirs.fileno()), str(i)],
                    pass_fds=(theirs.fileno(),),
                    stdin=subprocess.DEVNULL,
                )
                theirs.close()
                self._procs.append(proc)
                conn = Connection(mine.detach())
                self._conns.append(conn)
                conn.send(self.deployment)
            async with asyncio.timeout(START_TIMEOUT_S):
                for conn in self._conns:
                    await self._expect(conn, "up", "failed to start")
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.send(None)
        deadline = time.monotonic() + 5.0
        for proc in self._procs:
            while proc.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            if proc.poll() is None:
                proc.kill()
                proc.wait(5.0)
        for conn in self._conns:
            conn.close()
        self._procs.clear()
        self._conns.clear()

    async def _expect(
        self, conn: Connection, kind: str, what: str = "exited during a wave"
    ) -> tuple[str, Any]:
        try:
            msg = await _recv(conn)
        except (EOFError, OSError) as exc:
            raise ClientProcessError(
                f"a load-generating process {what}; the sweep stops here (rerun it, or "
                "--client-processes 1 to run every stream in this process; waves already "
                "staged are kept)"
            ) from exc
        if not isinstance(msg, tuple) or msg[0] != kind:
            raise ClientProcessError(f"a load-generating process answered {msg!r}, not {kind!r}")
        return msg

    async def run_wave(
        self, *, wave: WaveRecord, target: WaveTarget, specs: Sequence[StreamSpec]
    ) -> WaveRecord:
        """Deal the wave's streams round-robin over as many processes as have at least
        ``min_streams_per_process`` each, and release them together."""
        bodies, per_request = prepare_streams(wave, specs, target)
        n = len(wave.requests)
        used = max(1, min(self.n_processes, n // self.min_streams_per_process))
        shares = [list(range(k, n, used)) for k in range(used)]
        conns = self._conns[:used]
        for conn, idx in zip(conns, shares, strict=True):
            conn.send(
                _Share(
                    url=target.url,
                    bodies=[bodies[i] for i in idx],
                    headers=[per_request[i] for i in idx],
                    records=[wave.requests[i] for i in idx],
                    anchor_perf_ns=wave.anchor_perf_ns,
                    total_timeout_s=target.total_timeout_s,
                )
            )
        await asyncio.gather(*(self._expect(c, "ready") for c in conns))
        release_ns = time.perf_counter_ns() + RELEASE_LEAD_NS
        for conn in conns:
            conn.send(("go", release_ns))
        results = await asyncio.gather(*(self._expect(c, "done") for c in conns))
        timings: list[ProcessTiming] = []
        for idx, (_, (records, timing)) in zip(shares, results, strict=True):
            for i, rec in zip(idx, records, strict=True):
                wave.requests[i] = rec
            timings.append(timing)
        return settle_wave(wave, timings)


if __name__ == "__main__":
    _worker_main(int(sys.argv[1]), int(sys.argv[2]))
