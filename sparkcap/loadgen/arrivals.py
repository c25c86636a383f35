"""Arrival instants from the event loop's own poll, not from when a coroutine got round to it.

Why: a synchronized wave's streams receive their chunks in bursts (a server's batched decode
step sends a chunk to every stream at once). One event loop learns of all of them from one
``epoll_wait`` and then resumes the streams one after another; stamping each chunk when its
coroutine resumes makes the last of a burst late by everything the loop did for the others
(HTTP parsing, SSE, JSON: tens of microseconds each). The instant the poll returned is when
the loop *knew* the bytes were there: a bound from above on their arrival that does not grow
with the burst. Load-generating processes (procs.py) run on a loop built with
:class:`ArrivalSelector`; a loop that is not ours (the in-process path) keeps stamping on
resumption.

A chunk whose socket was not reported since the previous chunk's stamp (its bytes were read
together with earlier ones, or a file descriptor was reused) is stamped on resumption, never
with an older report.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from typing import Any

_by_loop: dict[int, ArrivalSelector] = {}


class ArrivalSelector(selectors.DefaultSelector):
    """Notes, per file descriptor, when a poll last reported it readable."""

    def __init__(self) -> None:
        super().__init__()
        self.readable_at: dict[int, int] = {}

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(timeout)
        if ready:
            t = time.perf_counter_ns()
            seen = self.readable_at
            for key, events in ready:
                if events & selectors.EVENT_READ:
                    seen[key.fd] = t
        return ready


def new_event_loop() -> asyncio.AbstractEventLoop:
    selector = ArrivalSelector()
    loop = asyncio.SelectorEventLoop(selector)
    _by_loop[id(loop)] = selector
    return loop


def for_running_loop() -> ArrivalSelector | None:
    return _by_loop.get(id(asyncio.get_running_loop()))


def socket_fd(response: Any) -> int | None:
    """The file descriptor an httpx response is read from (``None`` if the stack hides it)."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    try:
        return int(sock.fileno()) if sock is not None else None
    except (OSError, ValueError):
        return None
