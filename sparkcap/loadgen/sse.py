"""Incremental Server-Sent Events parser over raw bytes.

Why our own: the timestamp that matters is when the bytes of an event arrive, so the parser
must be fed exactly what the socket delivered, in order, and must hand back every event that
those bytes completed. It follows the WHATWG event-stream rules that OpenAI-compatible servers
rely on: LF, CRLF or CR line ends (a CRLF may be split across reads), ``:`` comment lines,
multi-line ``data:`` joined by LF, and dispatch on a blank line. Line and event sizes are
bounded so that a hostile or broken server fails one request instead of exhausting memory.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_LINE_BYTES = 1 << 20
DEFAULT_MAX_EVENT_BYTES = 1 << 20


class SSEProtocolError(ValueError):
    """The byte stream is not a well-formed, bounded event stream."""


@dataclass(slots=True)
class SSEEvent:
    data: str
    event: str = "message"


_KNOWN_FIELDS = (b"data", b"event", b"id", b"retry")


class SSEParser:
    """``foreign_lines`` counts lines no event stream has (unknown fields, an unterminated
    last line that is not one): an HTML page or a JSON body read as a stream is nothing but
    those, which tells it from an event stream that was merely cut."""

    __slots__ = (
        "_buf",
        "_data_bytes",
        "_data_lines",
        "_event_type",
        "_max_event",
        "_max_line",
        "_skip_lf",
        "foreign_lines",
    )

    def __init__(
        self,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        self._buf = bytearray()
        self._data_lines: list[bytes] = []
        self._data_bytes = 0
        self._event_type = b""
        self._skip_lf = False
        self._max_line = max_line_bytes
        self._max_event = max_event_bytes
        self.foreign_lines = 0

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume bytes; return the events they completed, in order."""
        events: list[SSEEvent] = []
        buf = self._buf
        if self._skip_lf and chunk:
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
            self._skip_lf = False
        buf += chunk
        start = 0
        n = len(buf)
        while start < n:
            lf = buf.find(b"\n", start)
            cr = buf.find(b"\r", start, lf if lf >= 0 else n)
            if cr >= 0:
                end = cr
                if cr + 1 < n:
                    nxt = cr + 2 if buf[cr + 1] == 0x0A else cr + 1
                else:
                    nxt = cr + 1
                    self._skip_lf = True
            elif lf >= 0:
                end = lf
                nxt = lf + 1
            else:
                break
            if end - start > self._max_line:
                raise SSEProtocolError(f"SSE line longer than {self._max_line} bytes")
            ev = self._line(bytes(buf[start:end]))
            if ev is not None:
                events.append(ev)
            start = nxt
        del buf[:start]
        if len(buf) > self._max_line:
            raise SSEProtocolError(f"SSE line longer than {self._max_line} bytes")
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: a trailing event with complete lines but no blank line is kept.

        Some servers omit the final blank line after ``data: [DONE]``; dropping that event would
        turn a finished stream into a truncated one. An unterminated last line is discarded.
        """
        rest = bytes(self._buf)
        self._buf.clear()
        if rest and rest[:1] != b":" and rest.partition(b":")[0] not in _KNOWN_FIELDS:
            self.foreign_lines += 1
        if self._data_lines:
            return [self._dispatch()]
        return []

    def _line(self, line: bytes) -> SSEEvent | None:
        if not line:
            if self._data_lines:
                return self._dispatch()
            self._event_type = b""
            return None
        if line[0] == 0x3A:  # ':' comment
            return None
        colon = line.find(b":")
        if colon < 0:
            field, value = line, b""
        else:
            field = line[:colon]
            value = line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if field == b"data":
            self._data_bytes += len(value) + 1
            if self._data_bytes > self._max_event:
                raise SSEProtocolError(f"SSE event larger than {self._max_event} bytes")
            self._data_lines.append(value)
        elif field == b"event":
            self._event_type = value
        elif field != b"id" and field != b"retry":
            self.foreign_lines += 1
        # id / retry / unknown fields carry nothing sparkcap measures
        return None

    def _dispatch(self) -> SSEEvent:
        raw = b"\n".join(self._data_lines)
        self._data_lines = []
        self._data_bytes = 0
        etype = self._event_type
        self._event_type = b""
        try:
            data = raw.decode("utf-8")
            name = etype.decode("utf-8") if etype else "message"
        except UnicodeDecodeError as exc:
            raise SSEProtocolError("SSE event is not valid UTF-8") from exc
        return SSEEvent(data=data, event=name)
