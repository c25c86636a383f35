"""HTTP clients for the wave hot path: one small connection pool per stream slot.

Why not one client for the whole wave: httpcore's pool assigns each new request by scanning
its connections, so releasing n streams through one pool costs O(n²) before the last request
is written; at a few hundred streams that alone made the release tens of milliseconds ragged.
A client per stream slot (slot i of every wave reuses its own kept-alive connection) makes
each send O(1). All clients share one TLS context, built once.
"""

from __future__ import annotations

import asyncio
import os
import select
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import httpx

from sparkcap.config.deployment import Deployment
from sparkcap.errors import MissingFile
from sparkcap.loadgen.arrivals import for_running_loop


def tls_verify(deployment: Deployment) -> ssl.SSLContext:
    if deployment.ca_bundle is not None:
        if not os.path.exists(deployment.ca_bundle):
            raise MissingFile(f"CA bundle not found: {deployment.ca_bundle}")
        return ssl.create_default_context(cafile=str(deployment.ca_bundle))
    return httpx.create_ssl_context()


# httpx asks for gzip/deflate but the stream is read raw (every read is stamped before it is
# parsed): compression is refused up front, on every request sparkcap makes. A server or proxy
# that compresses anyway is a protocol error (client.py), because a compressor also buffers,
# and its output's arrival times are no longer the server's token times.
IDENTITY_ENCODING = {"Accept-Encoding": "identity"}


def make_client(
    deployment: Deployment,
    max_streams: int,
    verify: ssl.SSLContext | None = None,
    max_connections: int | None = None,
) -> httpx.AsyncClient:
    t = deployment.timeouts
    limit = max_connections if max_connections is not None else max_streams + 4
    return httpx.AsyncClient(
        headers=IDENTITY_ENCODING,
        timeout=httpx.Timeout(connect=t.connect_s, read=t.read_idle_s, write=30.0, pool=30.0),
        limits=httpx.Limits(
            max_connections=limit,
            max_keepalive_connections=limit,
            keepalive_expiry=120.0,
        ),
        verify=verify if verify is not None else tls_verify(deployment),
        follow_redirects=False,
        trust_env=False,
    )


class StreamClients:
    """Clients by stream slot, created on first use; ``async with`` closes them all.

    Each slot's client holds one connection, whose socket is noted when it is made (httpcore's
    ``trace`` extension): a held request (client.py) is checked with :meth:`answered_early`
    before its last byte, because writing to a server that already answered and closed draws a reset
    that discards its answer. Plain TCP only: over TLS the answer cannot be told from the
    peer's own records, and such a request is recorded as a lost connection.
    """

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self._verify = tls_verify(deployment)
        self._clients: dict[int, httpx.AsyncClient] = {}
        self._sockets: dict[int, socket.socket] = {}

    def __getitem__(self, slot: int) -> httpx.AsyncClient:
        client = self._clients.get(slot)
        if client is None:
            client = self._clients[slot] = make_client(
                self.deployment, 1, self._verify, max_connections=1
            )
        return client

    def trace(self, slot: int) -> Callable[[str, dict[str, Any]], Awaitable[None]]:
        async def note_connection(event: str, info: dict[str, Any]) -> None:
            if event == "connection.connect_tcp.complete":
                stream = info.get("return_value")
                sock = stream.get_extra_info("socket") if stream is not None else None
                if sock is not None:
                    self._sockets[slot] = sock
                    arrivals = for_running_loop()
                    if arrivals is not None:
                        arrivals.watch(sock)
            elif event == "connection.start_tls.complete":
                # a TLS peer sends records of its own after the handshake (session tickets):
                # a readable socket no longer means an answer, so TLS slots are not peeked
                self._sockets.pop(slot, None)

        return note_connection

    def answered_early(self, slots: Iterable[int]) -> set[int]:
        """The slots whose server has sent anything (an answer, or a close) already: one
        poll for a whole wave, so the release itself only writes."""
        socks = {}
        for slot in slots:
            sock = self._sockets.get(slot)
            if sock is not None and sock.fileno() >= 0:
                socks[sock.fileno()] = slot
        if not socks:
            return set()
        poller = select.poll()
        for fd in socks:
            poller.register(fd, select.POLLIN)
        return {socks[fd] for fd, _ in poller.poll(0)}

    async def __aenter__(self) -> StreamClients:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        clients = list(self._clients.values())
        self._clients.clear()
        for c in clients:
            await c.aclose()


class FetchFailed(Exception):
    """A small request (a scrape, the models listing) that gave no usable body; the message
    names the URL and why, and is what gets recorded or printed; ``cause`` is httpx's error,
    where one was the reason (a caller tells an unreachable server from a bad answer)."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class FetchTimedOut(FetchFailed):
    """No complete answer within the deadline: a page that trickles or never ends. A caller
    that asks the same page around every wave stops asking after a few of these, since each
    one adds the whole deadline to a wave's wall time."""


# a page that missed its deadline this many times running is not asked again in the sweep:
# one miss may be a busy server, two running are a page that holds every wave for its deadline
TIMEOUTS_BEFORE_GIVING_UP = 2


async def fetch_bounded(
    client: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    total_s: float,
    max_bytes: int,
) -> tuple[int, bytes]:
    """The status and body of one GET, within ``total_s`` in all and never more than
    ``max_bytes`` held: httpx's timeout bounds each read, so a body trickling a byte at a time
    would hold the caller for as long as the server likes, and reading the whole body before
    measuring it lets a server fill the client's memory. A non-200 answer's body is not read."""
    try:
        async with asyncio.timeout(total_s):
            async with client.stream("GET", url, headers=headers) as r:
                if r.status_code != 200:
                    return r.status_code, b""
                encoding = r.headers.get("content-encoding", "identity").strip().lower()
                if encoding not in ("", "identity"):
                    # asked for identity: decoding anyway would let a small body expand unbounded
                    raise FetchFailed(f"body sent with Content-Encoding {encoding!r} from {url}")
                body = bytearray()
                async for piece in r.aiter_raw():
                    body += piece
                    if len(body) > max_bytes:
                        raise FetchFailed(f"body larger than {max_bytes} bytes from {url}")
                return r.status_code, bytes(body)
    except TimeoutError:
        raise FetchTimedOut(f"no complete answer within {total_s:g} s from {url}") from None
    except httpx.HTTPError as exc:
        raise FetchFailed(f"{type(exc).__name__} from {url}", exc) from None
