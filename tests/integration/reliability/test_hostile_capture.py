"""Hostile servers and inputs on the capture side cost one stream, never a wave or a night
(absurd usage, compression, URL credentials and query strings, malformed answers,
bad config values). Every server here is a raw socket on 127.0.0.1 (``rawserver.py``)."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import logging
import os
import subprocess
import tracemalloc
from array import array
from pathlib import Path

import duckdb
import pytest

from sparkcap.config.plan import SweepPlan, SweepRequest
from sparkcap.loadgen.records import RequestRecord, WaveRecord
from tests.integration.reliability.imperfect_nights import (
    TOKENS,
    ImperfectNight,
    stream_with_usage,
)
from tests.integration.reliability.rawserver import RawServer, vllm_stream
from tests.support.cli import cli_in_process, sweep_args
from tests.support.fleets import fleet_load_error, write_fleet
from tests.support.queries import q
from tests.support.sims import dep

pytestmark = [pytest.mark.reliability, pytest.mark.integration]

DEAD = "http://127.0.0.1:9/v1"


def staged_requests(db: Path) -> list[tuple[object, ...]]:
    return q(
        db,
        "select status, completion_tokens, prompt_tokens, cached_prompt_tokens, "
        "count_source, error from raw.requests order by request_id",
    )


def capture(
    endpoint: str, levels: tuple[int, ...], client_processes: int = 1, **dep_kw: object
) -> list[WaveRecord]:
    """The sweep's waves against ``endpoint``, in memory (no preflight, nothing staged)."""
    from sparkcap.loadgen.sweep import new_run_id, run_sweep

    plan = SweepPlan(
        levels=levels,
        trials=1,
        warmup=False,
        max_tokens=8,
        max_remeasures=0,
        client_processes=client_processes,
    )
    return asyncio.run(run_sweep(dep(endpoint, "m", **dep_kw), "code", plan, new_run_id()))


def header_map(head: bytes) -> dict[bytes, bytes]:
    lines = head.split(b"\r\n")[1:]
    return {k.strip().lower(): v.strip() for k, _, v in (x.partition(b":") for x in lines if x)}


def run_one_wave(endpoint: str, db: Path, streams: int, **dep_kw: object) -> object:
    """One staged wave of ``streams`` streams, in this process (preflight included)."""
    from sparkcap.night.sweeps import run_sweeps

    plan = SweepPlan(
        levels=(streams,),
        trials=1,
        warmup=False,
        max_tokens=4,
        max_remeasures=0,
        client_processes=1,
    )
    req = SweepRequest(deployment=dep(endpoint, "m", **dep_kw), workload="code", plan=plan)
    return asyncio.run(run_sweeps([req], db))


# -- item 1: a count the server gives is checked like any other server output -------------

ABSURD_USAGE = {
    "completion 2^31": ({"prompt_tokens": 9, "completion_tokens": 2**31}, None),
    "completion true": ({"prompt_tokens": 9, "completion_tokens": True}, None),
    "completion float": ({"prompt_tokens": 9, "completion_tokens": 4.0}, None),
    "completion text": ({"prompt_tokens": 9, "completion_tokens": "4"}, None),
    "prompt 2^31": ({"prompt_tokens": 2**31, "completion_tokens": 4}, None),
    "prompt true": ({"prompt_tokens": True, "completion_tokens": 4}, None),
    "cached 2^31": (
        {
            "prompt_tokens": 9,
            "completion_tokens": 4,
            "prompt_tokens_details": {"cached_tokens": 2**31},
        },
        None,
    ),
    "cached above prompt": (
        {
            "prompt_tokens": 9,
            "completion_tokens": 4,
            "prompt_tokens_details": {"cached_tokens": 10},
        },
        None,
    ),
    "continuous goes down": ({"prompt_tokens": 9, "completion_tokens": 4}, [1, 3, 2, 4]),
    "zero for text": ({"prompt_tokens": 9, "completion_tokens": 0}, None),
    "above max_tokens": ({"prompt_tokens": 9, "completion_tokens": 3_000_000}, None),
}


def test_absurd_usage_counts_are_stored_as_null_with_the_reason(tmp_path: Path) -> None:
    """One wave, one stream per kind of impossible usage: every wave is staged (2^31 or ``true``
    would raise in Arrow and lose the wave), each stream's counts are NULL with
    ``count_source = 'invalid_usage'`` and the reason in ``error``, and nothing is wrapped
    (per-chunk counts that went down are NULL, not negative)."""
    bodies = [stream_with_usage(u, per_chunk) for u, per_chunk in ABSURD_USAGE.values()]
    db = tmp_path / "absurd.duckdb"
    with RawServer(lambda o: [bodies[(o - 1) % len(bodies)]]) as srv:  # 0: the models probe
        result = run_one_wave(srv.endpoint, db, len(bodies), continuous_usage=True)
    assert result.status == "complete", result.reason  # type: ignore[attr-defined]
    rows = staged_requests(db)
    assert len(rows) == len(bodies)
    for status, completion, prompt, cached, source, error in rows:
        assert status == "ok"
        assert (completion, prompt, cached, source) == (None, None, None, "invalid_usage")
        assert "usage ignored" in error
    reasons = " | ".join(str(r[5]) for r in rows)
    for needle in (
        "completion_tokens 2147483648 is not a token count",
        "completion_tokens true",
        "completion_tokens 4.0",
        'completion_tokens "4"',
        "prompt_tokens 2147483648",
        "prompt_tokens true",
        "cached_tokens 2147483648",
        "cached_tokens 10 exceed prompt_tokens 9",
        "completion_tokens went down from 3 to 2",
        "completion_tokens 0 for 4 chunk(s)",
        "completion_tokens 3000000 is more than the 4 asked for",
    ):
        assert needle in reasons, (needle, reasons)
    with duckdb.connect(str(db), read_only=True) as con:
        (n_chunks, n_counted) = con.execute(
            "select count(*), count(n_tokens) from raw.chunks"
        ).fetchone() or (0, 0)
    assert n_chunks == 4 * len(bodies) and n_counted == 0


def test_staging_never_wraps_or_raises_on_a_count_a_server_sent() -> None:
    """Defence in depth: a record whose counts never went through the stream parser (a probe,
    an older spool) is checked again where it becomes Arrow columns."""
    from sparkcap.store.arrow_tables import wave_tables

    wave = WaveRecord("w", "r", "d", "m", "http://u:secret-pw@h/v1", "code", 1, 1, 0, 0)
    rec = RequestRecord("w/s000", 0, "p", 4, 4, 0.0)
    rec.completion_tokens, rec.prompt_tokens = 2**31, True  # type: ignore[assignment]
    rec.chunks.t_ns, rec.chunks.n_chars = array("q", [1, 2, 3]), array("q", [1, 1, 1])
    rec.chunks.n_tokens = array("q", [2**40, -5, 3])
    wave.requests = [rec]
    tables = wave_tables(wave)
    row = tables["requests"].to_pylist()[0]
    assert (row["completion_tokens"], row["prompt_tokens"], row["count_source"]) == (
        None,
        None,
        "invalid_usage",
    )
    assert tables["chunks"].column("n_tokens").to_pylist() == [None, None, 3]
    assert "secret-pw" not in tables["waves"].column("endpoint")[0].as_py()


def test_token_lengths_beyond_the_int32_columns_are_refused_up_front(tmp_path: Path) -> None:
    """``--max-tokens 3000000000`` and a fleet file's ``max_tokens`` are refused with one
    line before anything is sent (never left for the server to refuse)."""
    from sparkcap.config.fleet import load_fleet
    from sparkcap.errors import FleetError

    p = cli_in_process(
        *sweep_args(DEAD),
        "--max-tokens",
        "3000000000",
        "--db",
        str(tmp_path / "x.duckdb"),
    )
    assert p.returncode != 0
    assert_one_error_line(p, "max_tokens")
    fleet = {
        "name": "big",
        "workloads": {"code": {"levels": [1], "max_tokens": 3_000_000_000}},
        "deployments": [{"name": "d", "model": "m", "endpoint": DEAD}],
    }
    path = tmp_path / "big.yaml"
    write_fleet(path, fleet)
    with pytest.raises(FleetError, match="max_tokens"):
        load_fleet(path)


@pytest.mark.slow
def test_a_fleet_night_with_absurd_usage_from_one_deployment_publishes_the_others(
    imperfect_cli_night: ImperfectNight,
) -> None:
    """The session's imperfect CLI night (``imperfect_nights.py``): beside a simulated
    deployment, one whose server reports ``completion_tokens`` 2^31 and ``prompt_tokens:
    true`` on every stream. The night is swept, staged, built and reported; the good
    deployment has its capacity, the absurd one's streams are stored with NULL counts and the
    reason (staging never raises in Arrow, which would publish nothing), and its capacity
    is no measurement, never "below 20 tok/s" (every stream's content came in one chunk: no
    decode window, no rate). A third deployment streams well but its /metrics counters and
    gauges grow by 1e20 a scrape: each reading is unavailable with what it read (a bigint cast
    of such a count would break every later build of the warehouse), and the night
    publishes."""
    p = imperfect_cli_night
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    # the load-generating processes write to fd 2 itself
    assert "Traceback" not in p.workers_stderr, p.workers_stderr[-3000:]
    assert next(p.reports.glob("2*/index.html")).exists(), p.stderr[-2000:]
    # the absurd deployment's counts fail data quality (it claims to report usage)
    assert "blocking expectations failed: completion_length_present" in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("error: "), p.stderr[-2000:]
    caps = dict(
        q(
            p.db,
            "select deployment, (capacity_streams, is_measured, capacity_verdict) "
            "from marts.fct_capacity",
        )
    )
    huge = q(
        p.db,
        "select evidence, status, unavailable_reason "
        "from intermediate.int_wave_server_evidence where deployment = 'huge' "
        "and evidence in ('requests_waiting', 'preemptions') "
        "and unavailable_reason like '%beyond 2^53%'",
    )
    absurd_rows = q(
        p.db,
        "select r.completion_tokens, r.prompt_tokens, r.count_source, r.error "
        "from raw.requests r join raw.waves w using (wave_id) where w.deployment = 'absurd'",
    )
    good, huge_cap, absurd_cap = caps["live"], caps["huge"], caps["absurd"]
    assert good[0] is not None and good[0] >= 1 and good[1], good
    assert huge_cap[0] is not None and huge_cap[0] >= 1 and huge_cap[1], huge_cap
    assert absurd_cap[1] is False and "below" not in str(absurd_cap[2]), absurd_cap
    assert "absurd/code: below" not in p.stdout, p.stdout
    assert {e for e, _, _ in huge} >= {"preemptions"}, huge
    assert all(status == "unavailable" and "e+20, beyond" in str(why) for _, status, why in huge)
    assert absurd_rows
    for completion, prompt, source, error in absurd_rows:
        assert (completion, prompt, source) == (None, None, "invalid_usage")
        assert "completion_tokens 2147483648 is not a token count" in error


# -- item 2: compression ---------------------------------------------------------------


def test_identity_is_asked_for_and_a_compressed_stream_is_a_protocol_error() -> None:
    """Every request asks for ``Accept-Encoding: identity``; a server (or proxy) that gzips
    anyway makes a protocol error that says so, not a `truncated` stream read as garbage."""
    body = gzip.compress(vllm_stream(TOKENS))

    def head(ordinal: int) -> bytes:
        return (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n"
            b"Connection: close\r\n\r\n"
        )

    with RawServer(lambda o: [body], head=head) as srv:
        (w,) = capture(srv.endpoint, (2,))
    assert len(srv.heads) == 2
    assert all(header_map(h)[b"accept-encoding"] == b"identity" for h in srv.heads), srv.heads
    for r in w.requests:
        assert r.status.value == "protocol_error"
        assert "Content-Encoding: gzip" in (r.error or "")


# -- item 10: endpoint URLs ------------------------------------------------------------

USER, PASSWORD = "canary-user", "canary-pw-51e8d2"


def test_url_credentials_are_sent_but_stored_and_printed_nowhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``http://user:pw@host/v1?api-version=…``: the server gets Basic auth and the query
    string on every request (the models probe and each stream: the query is never mangled
    into the path); the credentials are in no byte of the DuckDB file or the spool, in no log
    line at DEBUG, in no fleet dump and in no error line."""
    from sparkcap.config.fleet import load_fleet
    from sparkcap.night.sweeps import run_sweeps

    basic = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    db = tmp_path / "creds.duckdb"
    with RawServer(lambda o: [vllm_stream(TOKENS)]) as srv:
        url = f"http://{USER}:{PASSWORD}@127.0.0.1:{srv.port}/v1?api-version=2024-06-01"
        req = SweepRequest(
            deployment=dep(url, "m"),
            workload="code",
            plan=SweepPlan(levels=(1,), trials=1, warmup=False, max_tokens=4, client_processes=1),
        )
        with caplog.at_level(logging.DEBUG):
            result = asyncio.run(
                run_sweeps([req], db, config={"sweeps": [req.model_dump(mode="json")]})
            )
    assert result.status == "complete"
    # every request carries the credentials as Basic auth and asks for identity; the stream's
    # URL and the preflight's models listing keep the query string
    (post,) = [h for h in srv.heads if h.startswith(b"POST")]
    assert post.split(b"\r\n")[0] == b"POST /v1/chat/completions?api-version=2024-06-01 HTTP/1.1"
    models = next(h for h in srv.heads if h.startswith(b"GET"))  # preflight: the first GET
    assert models.split(b"\r\n")[0] == b"GET /v1/models?api-version=2024-06-01 HTTP/1.1"
    for head in srv.heads:
        assert header_map(head)[b"authorization"] == basic.encode()
        assert header_map(head)[b"accept-encoding"] == b"identity"
    stored = db.read_bytes() + b"".join(
        f.read_bytes() for f in Path(os.environ["SPARKCAP_HOME"]).rglob("*") if f.is_file()
    )
    for secret in (PASSWORD, USER, basic.split()[1]):
        assert secret.encode() not in stored
        assert secret not in caplog.text
    with duckdb.connect(str(db), read_only=True) as con:
        (endpoint,) = con.execute("select endpoint from raw.waves").fetchone() or ("",)
    assert endpoint == f"http://127.0.0.1:{srv.port}/v1?api-version=2024-06-01"
    # a fleet file: dumped (raw.runs.config_json, Prefect) without them, resolved with them
    path = tmp_path / "creds.yaml"
    write_fleet(
        path,
        {
            "name": "c",
            "workloads": {"code": {"levels": [1]}},
            "deployments": [{"name": "d", "model": "m", "endpoint": url}],
        },
    )
    fleet = load_fleet(path)
    assert PASSWORD not in fleet.model_dump_json() and PASSWORD not in repr(fleet)
    (swept,) = fleet.sweep_requests()
    assert swept.deployment.basic_auth_header() == basic
    # an error line names the endpoint without them
    dead = f"http://{USER}:{PASSWORD}@127.0.0.1:9/v1"
    # in this process: the preflight fails before any wave, so no load-generating process
    # writes to the terminal, and what a child would log to its stderr is in caplog
    with caplog.at_level(logging.DEBUG):
        p = cli_in_process(
            *sweep_args(dead),
            "--db",
            str(tmp_path / "dead.duckdb"),
        )
    assert p.returncode != 0 and "127.0.0.1:9" in p.stderr
    for shown in (p.stderr + p.stdout, caplog.text):
        assert PASSWORD not in shown and USER not in shown


def test_every_url_built_from_the_endpoint_keeps_its_query_string() -> None:
    """Azure's ``?api-version=`` goes on every request, after the path (never mangled into
    it: ``/v1?api-version=…/chat/completions``)."""
    d = dep("https://u:p@example.org/openai/v1/?api-version=2024-06-01", "m")
    q = "?api-version=2024-06-01"
    assert d.chat_url == f"https://example.org/openai/v1/chat/completions{q}"
    assert d.models_url == f"https://example.org/openai/v1/models{q}"
    assert d.server_url("metrics") == f"https://example.org/openai/metrics{q}"
    assert str(d.endpoint) == f"https://example.org/openai/v1/{q}"
    from sparkcap.loadgen.metrics import metrics_url

    assert metrics_url(d) == f"https://example.org/openai/metrics{q}"  # the scrape's own URL


# -- item 12: malformed answers ----------------------------------------------------------


def test_an_oversized_response_head_is_a_protocol_error_not_a_dead_server() -> None:
    """A 200 whose head exceeds httpcore's limit was answered: each stream is a
    protocol error with the reason, and the sweep is not stopped as "stopped answering"."""

    def head(ordinal: int) -> bytes:
        filler = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"y" * 1000) for i in range(200))
        return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + filler + b"\r\n"

    with RawServer(lambda o: [vllm_stream(TOKENS)], head=head) as srv:
        waves = capture(srv.endpoint, (1, 2))
    assert len(waves) == 2  # the sweep went on
    for r in (r for w in waves for r in w.requests):
        assert r.status.value == "protocol_error"
        assert "response head is larger than 100 KiB" in (r.error or "")


HTML = b"<!doctype html><html><head><title>Login</title></head><body>Sign in</body></html>\n"
JSON_REPLY = json.dumps(
    {
        "id": "x",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 1},
    }
).encode()


@pytest.mark.parametrize(
    ("content_type", "body", "needle"),
    [
        pytest.param(b"text/html; charset=utf-8", HTML, "'text/html', not an event", id="html"),
        pytest.param(b"application/json", JSON_REPLY, "'application/json'", id="json"),
        pytest.param(b"text/event-stream", JSON_REPLY, "not an event stream", id="json-as-sse"),
    ],
)
def test_an_html_page_or_a_json_reply_is_a_protocol_error(
    content_type: bytes, body: bytes, needle: str
) -> None:
    """A login page from a proxy, or a non-streamed JSON answer, is a protocol error with the
    reason and the start of the body, never a `truncated` stream."""

    def head(ordinal: int) -> bytes:
        return (
            b"HTTP/1.1 200 OK\r\nContent-Type: " + content_type + b"\r\nConnection: close\r\n\r\n"
        )

    with RawServer(lambda o: [body], head=head) as srv:
        (w,) = capture(srv.endpoint, (1,))
    (r,) = w.requests
    assert r.status.value == "protocol_error", r.error
    assert needle in (r.error or "")


@pytest.mark.parametrize("content_type", [b"text/plain", b"application/octet-stream", b""])
def test_an_event_stream_under_another_label_is_read(content_type: bytes) -> None:
    """Gateways label a stream text/plain or octet-stream: the body decides, and a real event
    stream under such a label is measured as usual."""

    def head(ordinal: int) -> bytes:
        label = b"Content-Type: " + content_type + b"\r\n" if content_type else b""
        return b"HTTP/1.1 200 OK\r\n" + label + b"Connection: close\r\n\r\n"

    with RawServer(lambda o: [vllm_stream(TOKENS[:4])], head=head) as srv:
        (w,) = capture(srv.endpoint, (1,))
    (r,) = w.requests
    assert r.status.value == "ok", r.error


# -- item 12: bad config values -----------------------------------------------------------


def test_an_infinite_timeout_is_refused(tmp_path: Path) -> None:
    """``read_idle_s: 1e309`` (infinity) would switch the idle timeout off: refused, in a
    fleet file with its line, and wherever a config is built."""
    from pydantic import ValidationError

    from sparkcap.config.deployment import Timeouts

    with pytest.raises(ValidationError, match="finite"):
        Timeouts(read_idle_s=float("1e309"))
    refused = fleet_load_error(
        tmp_path / "inf.yaml",
        "name: inf\nworkloads:\n  code:\n    levels: [1]\ndeployments:\n"
        "  - name: d\n    model: m\n    endpoint: http://127.0.0.1:9/v1\n"
        "    timeouts:\n      read_idle_s: 1e309\n",
    )
    assert "read_idle_s" in refused, refused


def assert_one_error_line(p: subprocess.CompletedProcess[str], needle: str) -> None:
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), p.stderr[-2000:]
    assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        pytest.param(["--extra-body", '{"temperature": NaN}'], "NaN", id="nan-extra-body"),
        pytest.param(["--header", "x-api-key: caf\u00e9"], "printable ASCII", id="non-ascii"),
        pytest.param(
            ["--header", "x-api-key: env:SPARKCAP_UNSET_HEADER_VAR"],
            "SPARKCAP_UNSET_HEADER_VAR, which is not set",
            id="unset-header-var",
        ),
        pytest.param(
            ["--extra-body", "[" * 30_000 + "]" * 30_000], "nested too deeply", id="deep-json"
        ),
        pytest.param(["--header", "no-colon-here"], "expected NAME:VALUE", id="header-syntax"),
    ],
)
def test_bad_request_settings_give_one_error_line_before_anything_is_sent(
    args: list[str], needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``NaN`` in ``--extra-body`` (unchecked, sent as ``null``), a non-ASCII header value
    (unchecked, a traceback) and a header whose variable is unset (unchecked, dropped silently)
    each end with one ``error:`` line naming the problem, and no run is written."""
    monkeypatch.delenv("SPARKCAP_UNSET_HEADER_VAR", raising=False)  # the unset variable
    with RawServer(lambda o: [vllm_stream(TOKENS)]) as srv:
        db = tmp_path / "x.duckdb"
        p = cli_in_process(
            *sweep_args(srv.endpoint),
            "--levels",
            "1",
            "--trials",
            "1",
            "--no-warmup",
            "--max-tokens",
            "4",
            "--client-processes",
            "1",
            "--db",
            str(db),
            *args,
        )
    assert p.returncode != 0
    assert_one_error_line(p, needle)
    assert "caf\u00e9" not in p.stderr  # a header value is never echoed
    assert srv.heads == []  # nothing was sent
    assert not db.exists()


# -- item 12: processes ------------------------------------------------------------------


def test_a_one_stream_sweep_starts_no_more_processes_than_it_can_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--client-processes 4`` for a sweep whose largest wave has one stream starts one
    load-generating process (a wave is dealt over one process per 16 streams), not four."""
    from sparkcap.loadgen import procs

    started: list[list[str]] = []
    real_popen = procs.subprocess.Popen

    def counting_popen(args, **kw):  # type: ignore[no-untyped-def]
        started.append(list(args))
        return real_popen(args, **kw)

    monkeypatch.setattr(procs.subprocess, "Popen", counting_popen)
    with RawServer(lambda o: [vllm_stream(TOKENS)]) as srv:
        (w,) = capture(srv.endpoint, (1,), client_processes=4)
    assert [r.status.value for r in w.requests] == ["ok"]
    assert len(started) == 1, started


@pytest.mark.parametrize(
    "listing",
    [
        b"[1, 2]",
        b'{"data": "all"}',
        b'{"data": [{"id": 5}, "m", null]}',
        b"not json",
        b"[" * 200_000 + b"]" * 200_000,
        b"[" * (2 << 20),
    ],
    ids=["list", "data-not-a-list", "ids-not-strings", "not-json", "deep", "over-1MiB"],
)
def test_a_models_listing_of_any_shape_is_no_traceback(listing: bytes) -> None:
    """The preflight reads ``/v1/models`` only to catch a wrong model name; a listing of
    another shape says nothing about the model (a JSON list raised AttributeError before)."""
    from sparkcap.night.sweeps import preflight

    with RawServer(lambda o: [vllm_stream(TOKENS)], models=listing) as srv:
        asyncio.run(preflight(dep(srv.endpoint, "m")))
        assert any(h.startswith(b"GET /v1/models") for h in srv.heads)


def test_an_unknown_model_names_a_bounded_list_of_what_the_server_offers() -> None:
    ids = [{"id": f"model-{i:04d}-" + "x" * 200} for i in range(3000)]
    listing = json.dumps({"data": ids}).encode()
    from sparkcap.errors import PreflightError
    from sparkcap.night.sweeps import preflight

    with (
        RawServer(lambda o: [vllm_stream(TOKENS)], models=listing) as srv,
        pytest.raises(PreflightError) as err,
    ):
        asyncio.run(preflight(dep(srv.endpoint, "m")))
    line = str(err.value)
    assert "model-0000-" in line and "and 2990 more" in line and len(line) < 1200, line[:300]


@pytest.mark.parametrize("lie", [1, 10**9])
def test_a_lying_tokenizer_cannot_blow_up_a_probe_document(
    lie: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/tokenize`` answering 1 (or a billion) for any text made the sizing loop grow the
    document by the server's ratio each step (16 M words, then 6·10¹⁰): a count no tokenizer
    could give is no size, and the document is sized by characters instead."""
    from sparkcap.loadgen import probes

    async def lying(client: object, dep: object, text: str) -> int:
        return lie

    monkeypatch.setattr(probes, "count_tokens", lying)
    tracemalloc.start()
    try:
        text, counted = asyncio.run(probes.document(None, None, 2000, "s"))  # type: ignore[arg-type]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert counted is None and len(text) < 2000 * 16 and peak < 20 << 20


def test_url_credentials_go_to_the_endpoints_origin_only() -> None:
    """A metrics_url on another host gets the deployment's headers, never the endpoint URL's
    own user:password (httpx, too, sent a URL's userinfo only to that URL)."""
    from sparkcap.loadgen.sweep import request_headers

    d = dep("http://u:pw@gpu-1:8000/v1", "m", metrics_url="http://monitor:9400/metrics")
    assert request_headers(d)["Authorization"].startswith("Basic ")
    assert request_headers(d, "http://gpu-1:8000/metrics")["Authorization"].startswith("Basic ")
    assert "Authorization" not in request_headers(d, "http://monitor:9400/metrics")
