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
import contextlib
import selectors
import socket
import struct
import time
from typing import Any

_by_loop: dict[int, ArrivalSelector] = {}


SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux
_PEEK_FLAGS = socket.MSG_PEEK | socket.MSG_DONTWAIT
_CMSG_BYTES = socket.CMSG_SPACE(16)


class ArrivalSelector(selectors.DefaultSelector):
    """Notes, per file descriptor, when the bytes a poll reported readable arrived.

    For a socket given to :meth:`watch` that is the kernel's own receive time of the newest
    bytes waiting on it (``SO_TIMESTAMPNS``, read with a peek that consumes nothing): it does
    not move when this process was descheduled or busy between the arrival and the poll. For
    any other descriptor, or when the kernel gave no time, it is the instant the poll returned.
    Noted per descriptor: the arrival of the oldest and of the newest waiting bytes (both the
    poll's instant when the kernel gave none); neither is ever later than the poll.
    """

    def __init__(self) -> None:
        super().__init__()
        # fd -> (oldest, newest) arrival of the bytes waiting when a poll reported it readable,
        # and whether the oldest is exact: a kernel time of bytes holding one event only
        self.readable_at: dict[int, tuple[int, int, bool]] = {}
        self._peekers: dict[int, socket.socket] = {}
        self._peek_buf = bytearray(1 << 16)
        # Linux turns receive timestamping on for the whole host while any socket asks for it,
        # and switches it back on lazily (deferred work) after the last such socket closed: a
        # wave's fresh connections could then get their first bytes unstamped. One socket that
        # asks for it for this process's lifetime keeps it on.
        self._keep_on = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with contextlib.suppress(OSError):
            self._keep_on.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)

    def watch(self, sock: Any) -> bool:
        """Have the kernel stamp this socket's arrivals, and read those stamps when polled."""
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            fd = int(sock.fileno())
            self._forget(fd)
            # a second object on the same descriptor, for recvmsg; detached, never closed
            self._peekers[fd] = socket.socket(fileno=fd)
        except (OSError, ValueError):
            return False
        return True

    def _forget(self, fd: int) -> None:
        old = self._peekers.pop(fd, None)
        if old is not None:
            old.detach()

    def _kernel_arrival_ns(
        self, fd: int, peeker: socket.socket, nbytes: int
    ) -> tuple[int | None, int]:
        """CLOCK_REALTIME ns at which the kernel received the segment holding the last of the
        first ``nbytes`` waiting bytes (``None``: nothing waiting, or no time given), and how
        many bytes the peek copied into ``_peek_buf``."""
        try:
            got, ancdata, _, _ = peeker.recvmsg_into(
                [memoryview(self._peek_buf)[:nbytes]], _CMSG_BYTES, _PEEK_FLAGS
            )
        except BlockingIOError:
            return None, 0
        except OSError:  # the descriptor is closed or now something else
            self._forget(fd)
            return None, 0
        if got == 0:
            return None, 0
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
                sec, nsec = struct.unpack("qq", data[:16])
                return int(sec * 1_000_000_000 + nsec), got
        return None, got

    def _events_waiting(self, nbytes: int) -> int:
        """Server-sent events completed in the first ``nbytes`` peeked bytes (plain HTTP: over
        TLS the bytes are ciphertext and none are found, which only ever costs exactness)."""
        buf = self._peek_buf
        return buf.count(b"\n\n", 0, nbytes) + buf.count(b"\r\n\r\n", 0, nbytes)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(timeout)
        if ready:
            t = time.perf_counter_ns()
            realtime_minus_perf: int | None = None
            seen = self.readable_at
            for key, events in ready:
                if not events & selectors.EVENT_READ:
                    continue
                fd = key.fd
                oldest = newest = t
                exact = False
                peeker = self._peekers.get(fd)
                if peeker is not None:
                    last, waiting = self._kernel_arrival_ns(fd, peeker, len(self._peek_buf))
                    lone = self._events_waiting(waiting) == 1
                    first = self._kernel_arrival_ns(fd, peeker, 1)[0] if last is not None else None
                    if last is not None and first is not None:
                        if realtime_minus_perf is None:
                            realtime_minus_perf = time.time_ns() - time.perf_counter_ns()
                        newest = min(t, last - realtime_minus_perf)
                        oldest = min(newest, first - realtime_minus_perf)
                        # one event alone in the kernel's queue: nothing later was merged into
                        # its segment, so its stamp is its own arrival however late the poll
                        exact = lone
                seen[fd] = (oldest, newest, exact)
        return ready

    def close(self) -> None:
        for fd in list(self._peekers):
            self._forget(fd)
        self._keep_on.close()
        super().close()


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
