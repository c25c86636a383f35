"""A misbehaving HTTP server on 127.0.0.1:0 for what an ASGI app cannot do: arbitrary byte
splits, oversize lines, invalid UTF-8, bodies that end whenever the test says."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterable

Script = Callable[[int], Iterable[bytes | float]]  # request ordinal -> pieces / pauses
Head = Callable[[int], bytes]  # request ordinal -> the response's status line and headers

DEFAULT_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


class RawServer:
    """``head`` (optional) replaces the streaming answer's status line and headers, e.g. to
    send a gzip encoding, another content type or an oversized head. ``heads`` keeps every
    request's head as received (request line and headers), the models probe's too.
    ``models`` (optional) is the body of a 200 answer to ``GET /v1/models`` (else 404)."""

    def __init__(
        self, script: Script, head: Head | None = None, models: bytes | None = None
    ) -> None:
        self.script = script
        self.head = head
        self.models = models
        self.heads: list[bytes] = []
        self.loop = asyncio.new_event_loop()
        self.ordinal = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.heads.append(head)
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if length:
                await reader.readexactly(length)
            ordinal = self.ordinal
            self.ordinal += 1
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if head.startswith(b"GET /v1/models"):
                if self.models is None:
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                else:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(self.models), self.models)
                    )
                await writer.drain()
                return
            writer.write(self.head(ordinal) if self.head is not None else DEFAULT_HEAD)
            for piece in self.script(ordinal):
                if isinstance(piece, float):
                    await asyncio.sleep(piece)
                else:
                    writer.write(piece)
                    await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    def __enter__(self) -> RawServer:
        async def start() -> None:
            self.server = await asyncio.start_server(self._handle, sock=self.sock)

        self._thread.start()
        asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            self.server.close()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await asyncio.sleep(0)

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


def vllm_stream(tokens: list[str], finish: str = "length", usage: bool = True) -> bytes:
    import json

    def ev(obj: object) -> bytes:
        return b"data: " + json.dumps(obj).encode() + b"\r\n\r\n"

    out = [
        b": keep-alive\r\n\r\n",
        ev({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
    ]
    out += [ev({"choices": [{"index": 0, "delta": {"content": t}}]}) for t in tokens]
    out.append(ev({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}))
    if usage:
        out.append(
            ev({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": len(tokens) * 2}})
        )
    out.append(b"data: [DONE]\r\n\r\n")
    return b"".join(out)
