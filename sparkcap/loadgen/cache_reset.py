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

import httpx

from sparkcap.config import Deployment
from sparkcap.loadgen.connections import make_client

RESET_ROUTES = ("reset_prefix_cache", "flush_cache")
_ABSENT = {404, 405, 501}
# a server's slot list is untrusted: more slots than any engine runs, or ids past this, are
# not a list of slots
MAX_SLOTS = 1024


async def reset_prefix_cache(dep: Deployment, headers: dict[str, str]) -> str:
    """Ask ``dep`` to drop its prefix cache; what it answered, in the words the wave keeps.
    Its own client, made and closed outside the timed wave."""
    async with make_client(dep, 1) as client:
        return await _reset(client, dep, headers)


async def _reset(client: httpx.AsyncClient, dep: Deployment, headers: dict[str, str]) -> str:
    for route in RESET_ROUTES:
        try:
            r = await client.post(dep.server_url(route), headers=headers)
        except httpx.HTTPError as exc:
            return f"failed: {type(exc).__name__} at /{route}"
        if r.status_code in _ABSENT:
            continue
        if 200 <= r.status_code < 300:
            return "reset"
        return f"failed: HTTP {r.status_code} at /{route}"
    erased = await _erase_slots(client, dep, headers)
    return "unsupported" if erased is None else erased


async def _erase_slots(
    client: httpx.AsyncClient, dep: Deployment, headers: dict[str, str]
) -> str | None:
    """llama-server's way: erase every slot's prompt. None when the server has no slots
    route, or refuses slot actions (started without ``--slot-save-path``)."""
    try:
        r = await client.get(dep.server_url("slots"), headers=headers)
    except httpx.HTTPError as exc:
        return f"failed: {type(exc).__name__} at /slots"
    if r.status_code in _ABSENT:
        return None
    if not 200 <= r.status_code < 300:
        return f"failed: HTTP {r.status_code} at /slots"
    ids = slot_ids(r)
    if ids is None:
        return "failed: /slots answered no list of slots"
    for slot in ids:
        try:
            e = await client.post(
                dep.server_url(f"slots/{slot}"), params={"action": "erase"}, headers=headers
            )
        except httpx.HTTPError as exc:
            return f"failed: {type(exc).__name__} at /slots/{slot}"
        if e.status_code in _ABSENT:
            return None
        if not 200 <= e.status_code < 300:
            return f"failed: HTTP {e.status_code} at /slots/{slot}"
    return "reset" if ids else None


def slot_ids(r: httpx.Response) -> list[int] | None:
    """The slot ids of a ``GET /slots`` answer, or None when it is not a list of slots with
    integer ids in range (a bool is no id)."""
    try:
        body = r.json()
    except ValueError:
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
