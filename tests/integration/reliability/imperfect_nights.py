"""One imperfect fleet through `sparkcap run --no-prefect`, once per test session, read by the
tests of what such a night must survive (built once, read many: a night apiece would cost
~60 CPU-s and a whole dbt build and GX validation each):

- ``dead``: nobody listens on its port; its preflight and its prompt-cache probe fail, and
  the night names it as not measured (``test_imperfect_night``);
- ``live``: a simulator the night launches itself, swept and probed from one launch
  (``test_night``), with a prompt-cache probe that runs although the dead one's failed;
- ``absurd``: a raw server whose every stream reports ``completion_tokens`` 2^31 and
  ``prompt_tokens: true``: stored with NULL counts and the reason (``test_hostile_capture``);
- ``huge``: a simulator that streams well and demands an API key (the canary, which must
  reach nothing but the server: ``test_guarantees``) and a custom header, whose /metrics
  counters grow by 1e20 a scrape: each reading unavailable, its capacity built.

The night runs in the test process (``cli_in_process``), with the load generated in two worker
processes (their stamps are the kernel's) whose file descriptor 2 is kept, the root logger at
DEBUG into a file, and ``night.plan.launched`` counted."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.integration.reliability.rawserver import RawServer
from tests.support.cli import cli_in_process
from tests.support.fleets import write_fleet
from tests.support.queries import q
from tests.support.sims import fast_profile
from tests.support.timing import RELAXED_TIMING

DEAD = "http://127.0.0.1:9/v1"
CANARY = "sk-canary-night-3e71b09d5a2c"
CANARY_HEADER = "hdr-canary-night-9b2f6e04d1a7"
TOKENS = [f"tok{i} " for i in range(4)]


def ev(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def stream_with_usage(usage: dict[str, object], per_chunk: list[object] | None = None) -> bytes:
    """A well-formed stream of ``TOKENS`` whose final usage object is ``usage``; with
    ``per_chunk``, each content chunk carries ``completion_tokens`` from it (continuous)."""
    out = [ev({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})]
    for i, t in enumerate(TOKENS):
        obj: dict[str, object] = {"choices": [{"index": 0, "delta": {"content": t}}]}
        if per_chunk is not None:
            obj["usage"] = {"prompt_tokens": 9, "completion_tokens": per_chunk[i]}
        out.append(ev(obj))
    out.append(ev({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
    out.append(ev({"choices": [], "usage": usage}))
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def huge_page(ordinal: int) -> list[bytes]:
    """A /metrics page whose waiting gauge and preemption counter read 1e20 × the scrape's
    ordinal, under each engine's names the diagnosis applies."""
    value = f"{(ordinal + 1) * 1e20:g}"
    lines = []
    for engine in ("sim", "vllm"):
        lines += [
            f"# TYPE {engine}:num_requests_waiting gauge",
            f"{engine}:num_requests_waiting {value}",
            f"# TYPE {engine}:num_preemptions counter",
            f"{engine}:num_preemptions_total {value}",
        ]
    return [("\n".join(lines) + "\n").encode()]


def plain_head(_: int) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"


@dataclass(frozen=True)
class ImperfectNight:
    db: Path
    reports: Path
    home: Path
    debug_log: Path
    returncode: int
    stdout: str
    stderr: str
    workers_stderr: str  # what the load-generating processes wrote to fd 2
    launches: list[dict[str, str]]  # each call of night.plan.launched: name → endpoint


@contextlib.contextmanager
def _fd2_into(path: Path) -> Iterator[None]:
    """The process's file descriptor 2 (what child processes inherit) into ``path``."""
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


@contextlib.contextmanager
def root_logging_into(path: Path) -> Iterator[None]:
    """The root logger at DEBUG into ``path`` while it lasts (httpx, httpcore and ours)."""
    handler = logging.FileHandler(path)
    root = logging.getLogger()
    old = root.level
    root.setLevel(logging.DEBUG)
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()
        root.setLevel(old)


def fleet(
    live_probe: dict[str, Any], bad_endpoint: str, huge_endpoint: str, page_port: int
) -> dict[str, Any]:
    # one 16-token stream a wave, no warm-up: about survival, not the client's timing
    plan = {"levels": [1, 2], "trials": 1, "max_tokens": 16, "warmup": False, "client_processes": 2}
    return {
        "name": "imperfect",
        "workloads": {"code": plan},
        "deployments": [
            {  # first: its failures must cost the others nothing
                "name": "dead",
                "model": "m",
                "endpoint": DEAD,
                "probes": live_probe,
                "timeouts": {"connect_s": 2},
            },
            {
                "name": "live",
                "model": "glm",
                "launch": {"kind": "sim"},
                "extra_body": {"ignore_eos": True},
                "probes": live_probe,
            },
            {"name": "absurd", "model": "m", "endpoint": bad_endpoint},
            {
                "name": "huge",
                "model": "m",
                "endpoint": huge_endpoint,
                "metrics_url": f"http://127.0.0.1:{page_port}/metrics",
                "api_key_env": "SPARKCAP_CANARY_NIGHT_KEY",
                "header_env": {"x-api-key": "SPARKCAP_CANARY_NIGHT_HDR"},
            },
        ],
    }


def run_imperfect_night(root: Path) -> ImperfectNight:
    from sparkcap.night import plan as night_plan
    from sparkcap.servers.sim.server import SimServer

    launches: list[dict[str, str]] = []
    real_launched = night_plan.launched

    @contextlib.contextmanager
    def counted(fleet: Any) -> Iterator[dict[str, str]]:
        with real_launched(fleet) as endpoints:
            launches.append(dict(endpoints))
            yield endpoints

    db, reports, home = root / "n.duckdb", root / "reports", root / "home"
    debug_log, workers_log = root / "debug.log", root / "workers.stderr"
    absurd = stream_with_usage({"prompt_tokens": True, "completion_tokens": 2**31})
    probe = {"prompt-cache": {"document_tokens": 400, "warm_requests": 1}}
    env = {
        **os.environ,
        "SPARKCAP_HOME": str(home),
        "SPARKCAP_CANARY_NIGHT_KEY": CANARY,
        "SPARKCAP_CANARY_NIGHT_HDR": CANARY_HEADER,
        **RELAXED_TIMING,
    }
    with (
        SimServer(
            [fast_profile("m")],
            required_api_key=CANARY,
            required_headers={"x-api-key": CANARY_HEADER},
        ) as sim,
        RawServer(lambda o: [absurd]) as bad,
        RawServer(huge_page, head=plain_head) as page,
    ):
        path = write_fleet(
            root / "imperfect.yaml", fleet(probe, bad.endpoint, sim.endpoint, page.port)
        )
        saved_launched = night_plan.launched
        night_plan.launched = counted  # type: ignore[assignment]
        try:
            with _fd2_into(workers_log), root_logging_into(debug_log):
                p = cli_in_process(
                    "run",
                    "--fleet",
                    str(path),
                    "--db",
                    str(db),
                    "--reports",
                    str(reports),
                    "--no-prefect",
                    env=env,
                )
        finally:
            night_plan.launched = saved_launched  # type: ignore[assignment]
    return ImperfectNight(
        db=db,
        reports=reports,
        home=home,
        debug_log=debug_log,
        returncode=p.returncode,
        stdout=p.stdout,
        stderr=p.stderr,
        workers_stderr=workers_log.read_text(errors="replace"),
        launches=launches,
    )


def assert_the_night_names_the_dead_node(
    db: Path,
    report: Path,
    measured: frozenset[str] = frozenset({"live"}),
    also_unmeasured: str = "",
) -> None:
    """``measured``: the deployments with a capacity; ``also_unmeasured``: the fleet
    capacity's not-measured list before the dead node (", "-joined, sorted)."""
    caps = q(db, "select deployment, workload, is_measured from marts.fct_capacity")
    # the live deployment was measured and built; the dead one has no capacity row at all
    assert {d for d, _, ok in caps if ok} == measured, caps
    assert "dead" not in {d for d, _, _ in caps}
    outcomes = dict(
        ((d, step), (status, reason))
        for d, step, status, reason in q(
            db, "select deployment, step, status, reason from raw.step_outcomes"
        )
    )
    assert outcomes[("dead", "preflight")][0] == "failed"
    assert "endpoint unreachable" in str(outcomes[("dead", "preflight")][1])
    assert outcomes[("dead", "probe:prompt-cache")][0] == "failed"
    assert outcomes[("live", "sweep")] == ("ok", None)
    assert outcomes[("live", "probe:prompt-cache")][0] == "ok"  # the dead probe cost nothing
    assert q(db, "select count(*) from marts.fct_prompt_cache where deployment = 'live'") == [(1,)]
    (missing, complete) = q(
        db, "select not_measured_deployments, is_complete from marts.fct_fleet_capacity"
    )[0]
    assert missing == also_unmeasured + "dead" and complete is False
    html = report.read_text()
    assert "Not measured tonight" in html and "Partial night" in html
    assert "endpoint unreachable" in html and "dead" in html
