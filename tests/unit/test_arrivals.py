"""The arrival clock of load-generating processes (loadgen/arrivals.py)."""

from __future__ import annotations

import asyncio
import gc
import socket
import time

import pytest

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


@pytest.mark.reliability
def test_a_watched_socket_is_stamped_with_the_kernels_receive_times() -> None:
    """Bytes that waited 80 ms for a busy process still carry their arrival instants."""
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    sel = arrivals.ArrivalSelector()
    try:
        assert sel.watch(client)
        sel.register(client, arrivals.selectors.EVENT_READ)
        sent_first = time.perf_counter_ns()
        server.send(b"data: first\n\n")
        time.sleep(0.03)
        sent_second = time.perf_counter_ns()
        server.send(b"data: second\n\n")
        time.sleep(0.05)  # the process is "busy": nothing polls meanwhile
        polled = time.perf_counter_ns()
        sel.select(1)
        oldest, newest, exact = sel.readable_at[client.fileno()]
        # (the kernel may merge the two segments while they wait: the oldest is then the
        # merged segment's, later than the first send but never earlier)
        assert sent_first <= oldest <= newest and sent_second <= newest < polled
        assert polled - newest > 40e6  # the wait is not in the stamp
        assert not exact  # two events waited together, so the first one's stamp may be late
        assert client.recv(100) == b"data: first\n\ndata: second\n\n"  # a peek reads nothing
        sent_third = time.perf_counter_ns()
        server.send(b"data: third\n\n")
        time.sleep(0.05)
        sel.select(1)
        oldest, newest, exact = sel.readable_at[client.fileno()]
        assert exact and sent_third <= oldest == newest < sent_third + 40e6  # alone: exact
    finally:
        sel.close()
        for s in (client, server, listener):
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
