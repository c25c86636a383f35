"""The study's responsiveness probes against a real llama-server: a prompt cache that serves a
repeated document, and a long prefill that slows the stream decoding beside it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkcap.config.deployment import Deployment
from sparkcap.night.sweeps import run_probe
from sparkcap.transform.dbt_build import build
from tests.support.queries import q

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def long_context_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from sparkcap.servers.llama import start_local_server

    # one thread: see tests/e2e/test_real_server.py's server
    s = start_local_server(
        slots=2, context=16384, threads=1, log_dir=tmp_path_factory.mktemp("logs")
    )
    try:
        yield s
    finally:
        s.stop()


@pytest.mark.real_server
def test_probes_against_llama_server(long_context_server: object, db_path: Path) -> None:
    dep = Deployment(
        name="gemma",
        endpoint=long_context_server.endpoint,  # type: ignore[attr-defined]
        model="gemma-3-270m",
        extra_body={"ignore_eos": True},
    )
    # half the sizes the study used on a Spark (one thread of a loaded 2-core machine prefills
    # ~50-200 tok/s): a 1,000-token document and a 1,500-token prompt show the same two effects
    asyncio.run(run_probe(dep, "prompt-cache", db_path, document_tokens=1000))
    asyncio.run(
        run_probe(
            dep,
            "prefill-interference",
            db_path,
            background_streams=1,
            background_tokens=300,
            long_prompt_tokens=1500,
            settle_s=1.0,
            probe_interval_s=0.5,
        )
    )
    build(db_path, select="+fct_prompt_cache +fct_prefill_interference")
    (doc, cold, warm, cached) = q(
        db_path,
        """
        select document_tokens, cold_ttft_s, warm_ttft_s, warm_cached_tokens
        from marts.fct_prompt_cache
    """,
    )[0]
    assert abs(doc - 1000) < 100 and cached > 750 and warm < cold / 2
    (tokens, ttft, before, during) = q(
        db_path,
        """
        select long_prompt_tokens, long_ttft_s, before_tok_s, during_tok_s
        from marts.fct_prefill_interference
    """,
    )[0]
    assert abs(tokens - 1500) < 100 and ttft > 0.5
    assert during < before  # the background stream slowed while the prompt was prefilled
