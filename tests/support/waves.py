"""Waves made by hand, as the capture records them, for tests that stage or judge waves
without a server."""

from __future__ import annotations

from typing import Any

from sparkcap.loadgen.records import RequestRecord, Status, WaveRecord

# a port nothing listens on: a hand-made wave was never sent anywhere
ENDPOINT = "http://127.0.0.1:9/v1"


def wave_record(
    concurrency: int,
    trial: int = 1,
    *,
    run_id: str = "r",
    deployment: str = "d",
    workload: str = "code",
    started_at_ns: int = 0,
    wave_id: str | None = None,
    **fields: Any,
) -> WaveRecord:
    """A wave of model ``m`` with no streams yet, its id the capture's own form
    (``run/deployment/workload/cN/tT``) unless ``wave_id`` names one; ``fields`` are any
    other of ``WaveRecord``'s."""
    fields.setdefault("model", "m")
    fields.setdefault("endpoint", ENDPOINT)
    fields.setdefault("anchor_perf_ns", 0)
    return WaveRecord(
        wave_id=wave_id or f"{run_id}/{deployment}/{workload}/c{concurrency}/t{trial}",
        run_id=run_id,
        deployment=deployment,
        workload=workload,
        concurrency=concurrency,
        trial=trial,
        started_at_ns=started_at_ns,
        **fields,
    )


def decode_ns(tokens: int, rate_tok_s: float) -> int:
    """How long a stream of ``tokens`` decodes after its first token at ``rate_tok_s`` (the
    first token is not a decoded one: the rate counts the ``tokens - 1`` after it)."""
    return int((tokens - 1) / rate_tok_s * 1e9)


def add_ok_stream(
    wave: WaveRecord,
    tokens: int,
    first_token_ns: int,
    last_token_ns: int,
    sent_ns: int | None = 0,
) -> RequestRecord:
    """A stream appended to ``wave`` that asked for and returned ``tokens`` and ended with the
    server's ``[DONE]``: ok, its id the capture's own form (``wave/sN``)."""
    index = len(wave.requests)
    req = RequestRecord(
        request_id=f"{wave.wave_id}/s{index}",
        stream_index=index,
        prompt_id="p",
        requested_tokens=tokens,
        required_tokens=tokens,
        temperature=0.0,
        sent_ns=sent_ns,
    )
    req.status, req.completion_tokens, req.saw_done = Status.OK, tokens, True
    req.first_token_ns, req.last_token_ns = first_token_ns, last_token_ns
    wave.requests.append(req)
    return req
