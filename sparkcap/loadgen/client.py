"""One streaming chat completion, timed on arrival and classified without guessing.

Rules this module enforces (see docs/concepts/promises.md):
- the arrival time of every read is taken with ``perf_counter_ns`` before anything is parsed;
- the first token is the first chunk that carries generated text, not the role-only chunk;
- token counts come from the server's ``usage``; chunks are never counted as tokens, and a
  count that cannot be true (not an integer, out of the int32 range, going down, fewer cached
  than prompt tokens, none for text that arrived) discards the stream's usage: NULL counts,
  ``count_source = 'invalid_usage'`` and the reason, never a guess and never a wrapped value;
- nothing is retried; every failure keeps the partial data received before it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpcore
import httpx
import orjson

from sparkcap.loadgen.arrivals import for_running_loop, socket_fd
from sparkcap.loadgen.records import NO_TOKENS, CountSource, RequestRecord, Status, is_count
from sparkcap.loadgen.sse import SSEParser, SSEProtocolError

ERROR_SNIPPET_CHARS = 500
FINISH_REASON_CHARS = 100
# the answer's text, and a thinking model's reasoning (vLLM's `reasoning_content`, renamed
# `reasoning` in 2025; OpenRouter's `reasoning_details[*].text`): both are generated tokens
_ANSWER_KEY = "content"
_REASONING_KEYS = ("reasoning_content", "reasoning")
_THINK_TAG = "<think>"
# what h11 says when the peer closed the connection: the stream was cut, not malformed
_DISCONNECTED = ("disconnected", "peer closed")


class _InBandError(Exception):
    pass


def _snippet(text: str) -> str:
    text = text.strip().replace("\n", " ")
    return text[:ERROR_SNIPPET_CHARS]


def _shown(value: object) -> str:
    """A value a server sent, as an error line may quote it: short, a container by its kind."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    try:
        return json.dumps(value)[:40]
    except (TypeError, ValueError):
        return type(value).__name__


def _delta_chars(choice: dict[str, Any]) -> tuple[int, int, bool]:
    """(answer characters, reasoning characters, whether the answer holds a ``<think>`` tag)
    of one choice's delta: the answer is its content and tool calls, the reasoning the fields
    thinking models stream it in."""
    delta = choice.get("delta") or {}
    if not isinstance(delta, dict):
        return 0, 0, False
    content = delta.get(_ANSWER_KEY)
    answer = len(content) if isinstance(content, str) else 0
    think = isinstance(content, str) and _THINK_TAG in content
    reasoning = 0
    for key in _REASONING_KEYS:
        v = delta.get(key)
        if isinstance(v, str):
            reasoning += len(v)
    details = delta.get("reasoning_details")
    if isinstance(details, list):
        for d in details:
            text = d.get("text") if isinstance(d, dict) else None
            if isinstance(text, str):
                reasoning += len(text)
    calls = delta.get("tool_calls")
    if calls:
        try:
            answer += len(json.dumps(calls))
        except RecursionError as exc:
            raise SSEProtocolError("JSON nested too deeply") from exc
    return answer, reasoning, think


class StreamState:
    """Applies parsed events to a record; separate from I/O so it can be tested on bytes."""

    __slots__ = (
        "_last_usage_tokens",
        "_settled",
        "_usage_chunks",
        "anchor",
        "parser",
        "rec",
        "usage_problem",
    )

    def __init__(self, rec: RequestRecord, anchor_perf_ns: int, parser: SSEParser) -> None:
        self.rec = rec
        self.anchor = anchor_perf_ns
        self.parser = parser
        self._last_usage_tokens: int | None = None
        self._usage_chunks = 0
        self._settled = False
        # why the server's usage cannot be true; once set, no count of this stream is kept
        self.usage_problem: str | None = None

    def _distrust(self, why: str) -> None:
        self.usage_problem = f"usage ignored: {why}"
        rec = self.rec
        rec.completion_tokens = rec.prompt_tokens = rec.cached_prompt_tokens = None
        rec.reasoning_tokens = None

    def finalize(self) -> None:
        """Settle ``count_source``: per-chunk counts only if *every* content chunk had usage.

        A server that attaches usage to its last content chunk only would otherwise make that
        one chunk look like it carried the whole output. Runs before the stream is judged
        (an impossible count must not make it ``short``); once only.
        """
        if self._settled:
            return
        self._settled = True
        rec = self.rec
        n = len(rec.chunks)
        if self.usage_problem is None and n and rec.completion_tokens == 0:
            self._distrust(f"completion_tokens 0 for {n} chunk(s) of generated text")
        if self.usage_problem is not None:
            if self._usage_chunks:
                for i in range(n):
                    rec.chunks.n_tokens[i] = NO_TOKENS
            rec.count_source = CountSource.INVALID_USAGE
            why = self.usage_problem
            rec.error = why if rec.error is None else f"{rec.error}; {why}"
            return
        if n and self._usage_chunks == n:
            rec.count_source = CountSource.CONTINUOUS_USAGE
            return
        if self._usage_chunks:
            for i in range(n):
                rec.chunks.n_tokens[i] = NO_TOKENS
        rec.count_source = (
            CountSource.USAGE if rec.completion_tokens is not None else CountSource.NONE
        )

    def feed(
        self,
        data: bytes,
        t_perf_ns: int,
        t_rest_perf_ns: int | None = None,
        first_exact: bool = False,
    ) -> None:
        """Apply the events ``data`` completes: the first at ``t_perf_ns`` (``first_exact``:
        that is the kernel's arrival time of it alone), any later ones at ``t_rest_perf_ns``
        (when the bytes behind the first arrived before the rest)."""
        later = t_perf_ns if t_rest_perf_ns is None else t_rest_perf_ns
        for i, ev in enumerate(self.parser.feed(data)):
            if i == 0:
                self._event(ev.event, ev.data, t_perf_ns - self.anchor, first_exact)
            else:
                self._event(ev.event, ev.data, later - self.anchor)

    def close(self, t_perf_ns: int) -> None:
        for ev in self.parser.close():
            self._event(ev.event, ev.data, t_perf_ns - self.anchor)

    def _event(self, event: str, data: str, t_ns: int, exact: bool = False) -> None:
        rec = self.rec
        if rec.saw_done:
            return  # anything after [DONE] carries no measurement
        if data.strip() == "[DONE]":
            rec.saw_done = True
            return
        if event == "error":
            raise _InBandError(_snippet(data))
        try:
            obj = orjson.loads(data)
        except RecursionError as exc:
            raise SSEProtocolError("JSON nested too deeply") from exc
        except ValueError as exc:
            raise SSEProtocolError(f"data is not JSON: {_snippet(data)[:80]!r}") from exc
        if not isinstance(obj, dict):
            raise SSEProtocolError("data is not a JSON object")
        if obj.get("error"):
            err = obj["error"]
            msg = err.get("message") if isinstance(err, dict) else err
            raise _InBandError(_snippet(str(msg)))
        choices = obj.get("choices") or []
        n_chars = n_answer = 0
        if isinstance(choices, list):
            for ch in choices:
                if not isinstance(ch, dict):
                    continue
                answer, reasoning, think = _delta_chars(ch)
                n_chars += answer + reasoning
                n_answer += answer
                rec.reasoning_chars += reasoning
                rec.think_tag = rec.think_tag or think
                fr = ch.get("finish_reason")
                if fr:
                    fr = fr if isinstance(fr, str) else _shown(fr)
                    rec.finish_reason = fr[:FINISH_REASON_CHARS]
        usage = obj.get("usage")
        chunk_tokens = NO_TOKENS
        if usage is not None and self.usage_problem is None:
            if isinstance(usage, dict):
                chunk_tokens = self._usage(usage, n_chars > 0)
            else:
                self._distrust(f"usage is {_shown(usage)}, not an object")
        if n_chars:
            if rec.first_token_ns is None:
                rec.first_token_ns = t_ns
                rec.first_token_exact = exact
            if n_answer and rec.first_answer_ns is None:
                rec.first_answer_ns = t_ns
            rec.last_token_ns = t_ns
            rec.last_token_exact = exact
            rec.chunks.append(t_ns, chunk_tokens, n_chars)

    def _usage(self, usage: dict[str, Any], content: bool) -> int:
        """Apply one ``usage`` object; returns the chunk's own token count when it carried
        text (continuous usage), else ``NO_TOKENS``. A value that cannot be true discards the
        stream's usage (:meth:`_distrust`); only what is impossible is refused, since a large
        count for few chunks is what speculative decoding looks like."""
        rec = self.rec
        chunk_tokens = NO_TOKENS
        ct = usage.get("completion_tokens")
        if ct is not None:
            if not is_count(ct):
                self._distrust(f"completion_tokens {_shown(ct)} is not a token count")
                return NO_TOKENS
            if rec.token_ceiling is not None and ct > rec.token_ceiling:
                self._distrust(
                    f"completion_tokens {ct} is more than the {rec.token_ceiling} asked for"
                )
                return NO_TOKENS
            prev = self._last_usage_tokens
            if prev is not None and ct < prev:
                self._distrust(f"completion_tokens went down from {prev} to {ct}")
                return NO_TOKENS
            if content:
                chunk_tokens = ct - (prev or 0)
                self._usage_chunks += 1
            self._last_usage_tokens = ct
            rec.completion_tokens = ct
        rt, why = _detail_count(usage, "completion_tokens_details", "reasoning_tokens")
        if why is not None:
            self._distrust(why)
            return NO_TOKENS
        if rt is not None:
            if rec.completion_tokens is not None and rt > rec.completion_tokens:
                self._distrust(
                    f"reasoning_tokens {rt} exceed completion_tokens {rec.completion_tokens}"
                )
                return NO_TOKENS
            rec.reasoning_tokens = rt
        pt = usage.get("prompt_tokens")
        if pt is not None:
            if not is_count(pt):
                self._distrust(f"prompt_tokens {_shown(pt)} is not a token count")
                return NO_TOKENS
            rec.prompt_tokens = pt
        cached, why = _detail_count(usage, "prompt_tokens_details", "cached_tokens")
        if why is not None:
            self._distrust(why)
            return NO_TOKENS
        if cached is not None:
            rec.cached_prompt_tokens = cached
        if (
            rec.cached_prompt_tokens is not None
            and rec.prompt_tokens is not None
            and rec.cached_prompt_tokens > rec.prompt_tokens
        ):
            self._distrust(
                f"cached_tokens {rec.cached_prompt_tokens} exceed prompt_tokens {rec.prompt_tokens}"
            )
            return NO_TOKENS
        return chunk_tokens


def _detail_count(usage: dict[str, Any], details: str, name: str) -> tuple[int | None, str | None]:
    """(``usage[details][name]``, None), (None, None) where the server gave none, or (None, why
    it cannot be true): the details must be an object and the value a token count."""
    found = usage.get(details)
    if found is None:
        return None, None
    if not isinstance(found, dict):
        return None, f"{details} is {_shown(found)}, not an object"
    value = found.get(name)
    if value is not None and not is_count(value):
        return None, f"{name} {_shown(value)} is not a token count"
    return value, None


async def _read_with_arrivals(
    response: httpx.Response,
    state: StreamState,
    readable_at: dict[int, tuple[int, int, bool]],
    fd: int,
    rec: RequestRecord,
) -> None:
    """Read the body, stamping events with the arrivals the loop's poll noted (arrivals.py).

    A poll notes the oldest and the newest waiting bytes, and whether the oldest is exact. The
    first part read after a new poll begins with the oldest bytes, so its first event gets
    that instant (and its exactness); every other event of
    the read gets the newest (never earlier than its own bytes). A part no poll accounts for
    since the previous stamp (read together with earlier bytes, or a reused descriptor's old
    note) is stamped on resumption. Nothing before this request was sent is ever used.
    """
    perf = time.perf_counter_ns
    prev = state.anchor + (rec.sent_ns or 0)
    last_oldest = 0
    async for part in response.aiter_raw():
        t = perf()
        first = rest = t
        first_exact = False
        polled = readable_at.get(fd)
        if polled is not None:
            oldest, newest, exact = polled
            if last_oldest < oldest and prev < oldest <= t:
                first, rest = oldest, min(max(newest, oldest), t)
                first_exact = exact
                last_oldest = oldest
            elif prev <= newest <= t:
                first = rest = newest
        prev = max(prev, rest)
        state.feed(part, first, rest, first_exact)
        if rec.saw_done:
            break


async def _head_of_body(response: httpx.Response) -> str:
    """The first few hundred characters of a body that is not a stream, for the error."""
    raw = b""
    async for part in response.aiter_raw():
        raw += part
        if len(raw) >= 4 * ERROR_SNIPPET_CHARS:
            break
    return _snippet(raw.decode("utf-8", errors="replace"))


_NOT_A_STREAM = frozenset({"text/html", "application/xhtml+xml", "application/json", "text/xml"})


def _content_coding(response: httpx.Response) -> str | None:
    """The response's content coding when it is not identity (``None``: the bytes are the
    body). Asked for identity (connections.py), a server may still compress; such bytes
    cannot be parsed as they arrive, and a compressor's buffering moves their arrival."""
    coding = response.headers.get("content-encoding", "").strip().lower()
    return None if coding in ("", "identity") else coding[:40]


def _malformed_http(exc: httpx.RemoteProtocolError) -> str | None:
    """What was wrong with a response httpcore could not parse (``None``: the peer only
    closed the connection, a cut rather than a malformed answer)."""
    text = str(exc)
    if any(k in text for k in _DISCONNECTED):
        return None
    if "Receive buffer too long" in text:
        return "the response head is larger than 100 KiB"
    return _snippet(text)[:200] or type(exc).__name__


def classify(rec: RequestRecord) -> Status:
    """Final verdict for a stream that ended without an exception."""
    if not rec.saw_done and rec.finish_reason is None:
        return Status.TRUNCATED
    if (
        rec.required_tokens is not None
        and rec.completion_tokens is not None
        and rec.completion_tokens < rec.required_tokens
    ):
        return Status.SHORT
    return Status.OK


async def stream_request(
    client: httpx.AsyncClient,
    url: str,
    body: bytes | dict[str, Any],
    headers: dict[str, str],
    rec: RequestRecord,
    anchor_perf_ns: int,
    total_timeout_s: float,
    *,
    release: asyncio.Event | None = None,
    on_parked: Callable[[], None] | None = None,
    answered_early: Callable[[], bool] | None = None,
    trace: Callable[[str, dict[str, Any]], Awaitable[None]] | None = None,
) -> RequestRecord:
    """Send one request and fill ``rec``; never raises for server or network misbehaviour.

    ``body`` is best given encoded (waves encode every body before the release).

    With ``release`` (a synchronized wave), everything but the body's last byte is written
    first (connection, headers, body), ``on_parked`` is called, and the last byte goes out
    when ``release`` is set: a server acts on a request only once it is complete, so the
    streams of a wave start together however long the client took to prepare each one.
    ``sent_ns`` is then the instant the request was completed. If the server has already
    answered (``answered_early``: a redirect or an auth failure sent before the body), the
    last byte is not written and httpcore reads that answer, as it does after a failed write.
    """
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    if "Content-Type" not in headers:
        headers = {**headers, "Content-Type": "application/json"}
    parser = SSEParser()
    state = StreamState(rec, anchor_perf_ns, parser)
    perf = time.perf_counter_ns
    rec.sent_ns = perf() - anchor_perf_ns
    parked = False

    def park() -> None:
        nonlocal parked
        if not parked:
            parked = True
            if on_parked is not None:
                on_parked()

    async def last_byte_on_release(gate: asyncio.Event) -> AsyncIterator[bytes]:
        yield content[:-1]
        park()  # the first part is written once the sender asks for the next
        await gate.wait()
        rec.sent_ns = perf() - anchor_perf_ns
        if answered_early is not None and answered_early():
            raise httpcore.WriteError("the server answered before the request was complete")
        yield content[-1:]

    try:
        async with asyncio.timeout(total_timeout_s):
            if release is not None and len(content) > 1:
                request = client.build_request(
                    "POST",
                    url,
                    content=last_byte_on_release(release),
                    headers={**headers, "Content-Length": str(len(content))},
                    extensions={"trace": trace} if trace is not None else None,
                )
            else:
                park()
                if release is not None:
                    await release.wait()
                request = client.build_request("POST", url, content=content, headers=headers)
            response = await client.send(request, stream=True, follow_redirects=False)
            try:
                rec.headers_ns = perf() - anchor_perf_ns
                rec.http_status = response.status_code
                coding = _content_coding(response)
                if response.status_code >= 300:
                    text = (
                        f"({coding}-encoded body, not shown)"
                        if coding is not None
                        else await _head_of_body(response)
                    )
                    if response.status_code in (429, 503):
                        rec.status = Status.REJECTED
                        rec.retry_after = response.headers.get("retry-after")
                    else:
                        rec.status = Status.SERVER_ERROR
                    rec.error = f"HTTP {response.status_code}: {text}"
                    return rec
                if coding is not None:
                    raise SSEProtocolError(
                        f"the stream came Content-Encoding: {coding} although identity was "
                        "asked for (a compressing proxy?): its arrival times would be the "
                        "compressor's, not the server's"
                    )
                media = response.headers.get("content-type", "").partition(";")[0]
                media = media.strip().lower()
                # a page or a JSON reply is refused at once; another label (text/plain and
                # octet-stream from gateways) is read, and the body decides (foreign_lines)
                if media in _NOT_A_STREAM or media.endswith("+json"):
                    raise SSEProtocolError(
                        f"HTTP {response.status_code} answered {media[:60]!r}, not an event "
                        f"stream: {await _head_of_body(response)}"
                    )
                arrivals = for_running_loop()
                fd = socket_fd(response) if arrivals is not None else None
                if arrivals is None or fd is None:
                    async for part in response.aiter_raw():
                        t = perf()
                        state.feed(part, t)
                        if rec.saw_done:
                            break
                else:
                    await _read_with_arrivals(response, state, arrivals.readable_at, fd, rec)
                state.close(perf())
            finally:
                await response.aclose()
        state.finalize()  # before the verdict: an impossible count must not judge the stream
        rec.status = classify(rec)
        verdict: str | None = None
        if rec.status is Status.SHORT:
            verdict = (
                f"delivered {rec.completion_tokens} of {rec.required_tokens} required tokens "
                f"(finish_reason={rec.finish_reason})"
            )
        elif rec.status is Status.TRUNCATED and parser.foreign_lines and not rec.n_chunks:
            # nothing of an event stream arrived, only other text: an HTML page, a JSON reply
            rec.status = Status.PROTOCOL_ERROR
            verdict = (
                f"the body is not an event stream ({parser.foreign_lines} line(s) that are "
                "no SSE field)"
            )
        elif rec.status is Status.TRUNCATED:
            verdict = "stream ended without [DONE] or finish_reason"
        if verdict is not None:
            rec.error = verdict if rec.error is None else f"{verdict}; {rec.error}"
    except _InBandError as exc:
        rec.status = Status.SERVER_ERROR
        rec.error = f"in-band error: {exc}"
    except SSEProtocolError as exc:
        rec.status = Status.PROTOCOL_ERROR
        rec.error = str(exc)
    except (TimeoutError, httpx.TimeoutException) as exc:
        rec.status = Status.TIMEOUT
        kind = type(exc).__name__
        rec.error = f"{kind} after {(perf() - anchor_perf_ns - (rec.sent_ns or 0)) / 1e9:.1f} s"
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        malformed = _malformed_http(exc) if isinstance(exc, httpx.RemoteProtocolError) else None
        if malformed is not None:
            # the server answered, with something that is not HTTP (an oversized head, a
            # broken chunk): a protocol error, never "stopped answering"
            rec.status = Status.PROTOCOL_ERROR
            rec.error = f"malformed HTTP response: {malformed}"
        else:
            # connection cut mid-stream: keep what arrived
            rec.status = Status.TRUNCATED
            rec.error = f"connection lost: {type(exc).__name__}"
    except httpx.HTTPError as exc:
        rec.status = Status.SERVER_ERROR
        rec.error = f"{type(exc).__name__}: {_snippet(str(exc))}"
    finally:
        park()  # a stream that failed before the gate must not hold the wave's release
        rec.end_ns = perf() - anchor_perf_ns
        state.finalize()
    return rec
