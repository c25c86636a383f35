"""The arrival stamps on a real loopback socket: the kernel's receive time, not the poll's."""

from __future__ import annotations

import socket
import time

import pytest

from sparkcap.loadgen import arrivals


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
