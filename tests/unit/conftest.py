"""Unit tests open no socket: what needs a server (even on loopback) is an integration test.
A connect or bind from a unit test fails it, naming the address."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _no_sockets(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def refuse(self: socket.socket, address: Any, *args: Any) -> None:
        if self.family == socket.AF_UNIX:  # a local pipe (asyncio's self-pipe), not the network
            return real[self.__class__.connect.__name__](self, address, *args)
        raise AssertionError(f"a unit test opened a socket to {address!r}")

    real = {"connect": socket.socket.connect}
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    yield
