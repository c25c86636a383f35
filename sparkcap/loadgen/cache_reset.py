"""Telling a server to forget its prefix cache before a measurement that must start cold.

Engines name the route differently: vLLM ``POST /reset_prefix_cache``, SGLang
``POST /flush_cache``; llama-server has no global one (its slots keep their prompts). The
answer is recorded on the wave as it came (``reset``, ``unsupported``, ``failed: ...``) and is
no proof by itself: dbt checks the first turns of the wave found nothing cached
(``int_session_cache``), so a route that answers 200 and forgets nothing is caught.
"""

from __future__ import annotations

import httpx

from sparkcap.config import Deployment
from sparkcap.loadgen.connections import make_client

RESET_ROUTES = ("reset_prefix_cache", "flush_cache")
_ABSENT = {404, 405, 501}


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
    return "unsupported"
