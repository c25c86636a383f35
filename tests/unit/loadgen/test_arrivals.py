"""The arrival clock of load-generating processes (loadgen/arrivals.py)."""

from __future__ import annotations

import asyncio
import gc
import socket
import time

from sparkcap.loadgen import arrivals


def test_a_poll_notes_when_it_saw_a_socket_readable_and_nothing_else() -> None:
    sel = arrivals.ArrivalSelector()
    a, b = socket.socketpair()
    quiet_a, quiet_b = socket.socketpair()
    try:
        sel.register(a, arrivals.selectors.EVENT_READ)
        sel.register(quiet_a, arrivals.selectors.EVENT_READ)
        assert sel.select(0) == [] and sel.readable_at == {}
        b.send(b"data: x\n\n")
        before = time.perf_counter_ns()
        (ready,) = sel.select(1)
        after = time.perf_counter_ns()
        assert ready[0].fd == a.fileno()
        oldest, newest, exact = sel.readable_at[a.fileno()]
        assert before <= oldest == newest <= after  # not watched: the poll's own instant
        assert not exact
        assert quiet_a.fileno() not in sel.readable_at
    finally:
        sel.close()
        for s in (a, b, quiet_a, quiet_b):
            s.close()


def test_only_loops_built_here_stamp_on_arrival() -> None:
    async def which() -> arrivals.ArrivalSelector | None:
        return arrivals.for_running_loop()

    loop = arrivals.new_event_loop()
    try:
        assert isinstance(loop.run_until_complete(which()), arrivals.ArrivalSelector)
    finally:
        loop.close()
    assert asyncio.run(which()) is None  # a loop that is not ours stamps on resumption


def test_socket_fd_is_none_when_the_stack_hides_the_socket() -> None:
    class Response:
        def __init__(self) -> None:
            self.extensions: dict[str, object] = {}

    assert arrivals.socket_fd(Response()) is None


def test_the_collector_is_off_while_any_wave_is_timed_and_back_after_the_last() -> None:
    from sparkcap.loadgen import wave

    assert gc.isenabled()
    wave._collector_off()  # one sweep's wave
    wave._collector_off()  # another deployment's, in the same process
    assert not gc.isenabled()
    wave._collector_back()
    assert not gc.isenabled()  # the other wave is still being timed
    wave._collector_back()
    assert gc.isenabled()
