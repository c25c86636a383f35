"""Telling a server to forget its prefix cache before a measurement that must start cold.

Engines name the route differently: vLLM ``POST /reset_prefix_cache``, SGLang
``POST /flush_cache``; llama-server has no global one, but erases one slot's prompt at
``POST /slots/{id}?action=erase`` when started with ``--slot-save-path`` (as sparkcap launches
it), every slot listed by ``GET /slots``. The answer is recorded on the wave as it came
(``reset``, ``unsupported``, ``failed: ...``) and is no proof by itself: dbt checks the first
turns of the wave found nothing cached (``int_session_cache``), so a route that answers 200
and forgets nothing is caught (llama-server's host-memory prompt cache, ``--cache-ram``, may
still hold what a slot forgot).
"""

from __future__ import annotations

import asyncio
import json

import httpx

from sparkcap.config.deployment import Deployment
from sparkcap.loadgen.connections import make_client

RESET_ROUTES = ("reset_prefix_cache", "flush_cache")
_ABSENT = {404, 405, 501}
# a server's slot list is untrusted: more slots than any engine runs, or ids past this, are
# not a list of slots
MAX_SLOTS = 1024
# a reset's answers are read only this far (a slot list of 1024 slots is ~200 KiB), and the
# whole reset, every route and slot, ends within RESET_DEADLINE_S or the deployment's own
# request deadline if shorter: a 200 that trickles a byte a second held a sweep for minutes
MAX_ANSWER_BYTES = 1 << 20
RESET_DEADLINE_S = 30.0


async def reset_prefix_cache(dep: Deployment, headers: dict[str, str]) -> str:
    """Ask ``dep`` to drop its prefix cache; what it answered, in the words the wave keeps.
    Its own client, made and closed outside the timed wave."""
    deadline_s = min(RESET_DEADLINE_S, dep.timeouts.total_s)
    async with make_client(dep, 1) as client:
        try:
            async with asyncio.timeout(deadline_s):
                return await _reset(client, dep, headers)
        except TimeoutError:
            return f"failed: no complete answer within {deadline_s:g} s"


async def _reset(client: httpx.AsyncClient, dep: Deployment, headers: dict[str, str]) -> str:
    for route in RESET_ROUTES:
        r, failed = await _ask(client, "POST", dep.server_url(route), headers, f"/{route}")
        if failed is not None:
            return failed
        if r is not None:
            return "reset"
    erased = await _erase_slots(client, dep, headers)
    return "unsupported" if erased is None else erased


async def _ask(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    headers: dict[str, str],
    where: str,
    params: dict[str, str] | None = None,
) -> tuple[bytes | None, str | None]:
    """One request of a reset: (the 2xx answer's body, None), (None, None) when the route is
    absent, or (None, the failure in the wave's words). The body is read only up to
    ``MAX_ANSWER_BYTES``: a larger one is a failure, never held whole."""
    try:
        async with client.stream(method, url, headers=headers, params=params) as r:
            if r.status_code in _ABSENT:
                return None, None
            if not 200 <= r.status_code < 300:
                return None, f"failed: HTTP {r.status_code} at {where}"
            body = bytearray()
            # decoded as it arrives (a server may compress anyway): the cap holds either way
            async for piece in r.aiter_bytes():
                body += piece
                if len(body) > MAX_ANSWER_BYTES:
                    return None, f"failed: answer over {MAX_ANSWER_BYTES >> 20} MiB at {where}"
            return bytes(body), None
    except httpx.HTTPError as exc:
        return None, f"failed: {type(exc).__name__} at {where}"


async def _erase_slots(
    client: httpx.AsyncClient, dep: Deployment, headers: dict[str, str]
) -> str | None:
    """llama-server's way: erase every slot's prompt. None when the server has no slots
    route, or refuses slot actions (started without ``--slot-save-path``)."""
    r, failed = await _ask(client, "GET", dep.server_url("slots"), headers, "/slots")
    if r is None:
        return failed
    ids = slot_ids(r)
    if ids is None:
        return "failed: /slots answered no list of slots"
    for slot in ids:
        url = dep.server_url(f"slots/{slot}")
        e, failed = await _ask(client, "POST", url, headers, f"/slots/{slot}", {"action": "erase"})
        if e is None:
            return failed
    return "reset" if ids else None


def slot_ids(answer: bytes) -> list[int] | None:
    """The slot ids of a ``GET /slots`` answer, or None when it is not a list of slots with
    integer ids in range (a bool is no id)."""
    try:
        body = json.loads(answer)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(body, list) or len(body) > MAX_SLOTS:
        return None
    ids: list[int] = []
    for slot in body:
        sid = slot.get("id") if isinstance(slot, dict) else None
        if type(sid) is not int or not 0 <= sid < MAX_SLOTS or sid in ids:
            return None
        ids.append(sid)
    return ids
