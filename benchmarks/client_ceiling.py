"""How many synchronized streams can sparkcap's client time honestly on this machine?

Starts the simulator in its own process (fixed 3-token chunks, a constant 60 tok/s per stream
whatever the batch, so every stream's true rate is known) and sweeps each stream count with
one warm-up and ``--trials`` counted waves. The simulator is pinned to CPUs of its own and the
client (this process, and the worker processes it starts, which inherit its CPUs) to the
others, so the server's work never takes the client's cores: by default the machine's CPUs
are split in two (the upper half the server's), or ``--server-cpus``/``--client-cpus`` name
them as ``taskset -c`` does. The simulator logs, per request, the monotonic
instants it handed its first and last content chunk to the socket; on Linux
``perf_counter_ns`` is CLOCK_MONOTONIC, shared by every process of the host, so client and
server instants are directly comparable. Printed per stream count, from one run:

- per-request rate error vs the server's own (n−1)/(t_last−t_first): median |err|, p95, max,
  and the signed median (a bias shows there, not in |err|);
- how late the client stamped first and last tokens (median, ms): the cause of any bias;
- start skew, loop lag p99 (worst process), CPU per process, and whether the wave would be
  re-measured as client-spoiled (dbt's ``client_spoiled_waves``, compiled:
  ``transform.live_judge.ClientSpoiledRule``);
- the ceilings, in streams and per client core: the largest stream count none of whose waves
  was client-spoiled, and the largest at which every process's loop lag p99 stays < 5 ms.

    .venv/bin/python benchmarks/client_ceiling.py [--levels 16,64,256,512] [--procs auto|N]
        [--tokens 300] [--trials 2] [--server-cpus 1 --client-cpus 0]
        [--guidellm /path/to/venv/bin/guidellm]

With ``--guidellm`` the same simulator is measured by GuideLLM in the same run (a separate
venv: ``python -m venv /tmp/gl && /tmp/gl/bin/pip install guidellm==0.8.1``), on the client's
CPUs, and its per-request errors are printed beside sparkcap's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from sparkcap.config.deployment import Deployment
from sparkcap.config.plan import SweepPlan
from sparkcap.loadgen.sweep import new_run_id, run_sweep
from sparkcap.night.calibrate import host_cpus, judged_plan, parse_cpus, pinned, split_cpus
from sparkcap.night.progress import live_decode_tok_s
from sparkcap.servers.sim.server import SimProcess
from sparkcap.transform.live_judge import ClientSpoiledRule

TOK_S = 60.0
CHUNK_TOKENS = 3
PROFILE = {
    "model": "bench",
    "step_s1": CHUNK_TOKENS / TOK_S,
    "batch_slowdown": 0.0,
    "fixed_chunk_tokens": CHUNK_TOKENS,
    "prefill_tok_s": 1_000_000,
    "max_slots": 4096,
}
LAG_CEILING_MS = 5.0


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def summarize(errs: list[float]) -> dict[str, float]:
    a = [abs(e) for e in errs]
    return {
        "median": statistics.median(a),
        "p95": pct(a, 0.95),
        "max": max(a),
        "signed": statistics.median(errs),
    }


def server_log(base_url: str) -> dict[str, dict[str, Any]]:
    entries = httpx.get(base_url + "/sim/log", params={"clear": "1"}, timeout=60).json()
    return {e["request_id"]: e for e in entries}


def sparkcap_level(sim: SimProcess, level: int, args: argparse.Namespace) -> dict[str, Any]:
    dep = Deployment(name="bench", endpoint=sim.endpoint, model="bench")
    plan_kw: dict[str, Any] = {}
    if args.procs != "auto":
        plan_kw["client_processes"] = int(args.procs)
    judged = judged_plan((level,))  # dbt's tolerances, as this environment sets them
    plan = SweepPlan(
        levels=(level,),
        trials=args.trials,
        warmup=True,
        max_tokens=args.tokens,
        max_remeasures=0,
        timing_error_tolerance=judged.timing_error_tolerance,
        start_skew_tolerance=judged.start_skew_tolerance,
        **plan_kw,
    )
    spoiled_by = ClientSpoiledRule.compile()  # dbt's rule, as this environment sets its vars
    server_log(sim.base_url)  # clear
    waves = asyncio.run(run_sweep(dep, "code", plan, new_run_id()))
    log = server_log(sim.base_url)
    errs: list[float] = []
    late_first: list[float] = []
    late_last: list[float] = []
    out: dict[str, Any] = {"level": level, "waves": []}
    for w in waves:
        if w.trial == 0:
            continue
        for r in w.requests:
            s = log.get(r.request_id)
            rate = live_decode_tok_s(r)
            if s is None or rate is None or not s["decode_tok_s"]:
                raise SystemExit(f"stream {r.request_id} has no rate: {r.status} {r.error}")
            errs.append((rate - s["decode_tok_s"]) / s["decode_tok_s"] * 100)
            assert r.first_token_ns is not None and r.last_token_ns is not None
            late_first.append((w.anchor_perf_ns + r.first_token_ns - s["first_token_ns"]) / 1e6)
            late_last.append((w.anchor_perf_ns + r.last_token_ns - s["last_token_ns"]) / 1e6)
        procs = w.client_processes
        out["waves"].append(
            {
                "start_skew_ms": w.start_skew_ms,
                "lag_p99_ms": max(p.loop_lag_p99_ms or 0.0 for p in procs),
                "cpu_pct": [p.cpu_pct for p in procs],
                "n_procs": len(procs),
                "spoiled": spoiled_by(w),
            }
        )
    out["err"] = summarize(errs)
    if args.worst:
        worst = sorted(zip(errs, late_first, late_last, strict=True), key=lambda x: -abs(x[0]))
        for e, lf, ll in worst[: args.worst]:
            print(f"  {level} streams: err {e:+.3f} % late first {lf:.2f} ms last {ll:.2f} ms")
    out["late_first_ms"] = statistics.median(late_first)
    out["late_last_ms"] = statistics.median(late_last)
    return out


def guidellm_level(sim: SimProcess, level: int, args: argparse.Namespace) -> dict[str, Any]:
    """GuideLLM's per-request rate vs the server's log, matched by first-token instant.

    GuideLLM (0.8.1) runs ``level`` concurrent streams, ``--trials`` requests each, with its
    own worker processes. Its per-request ``inter_token_latency_ms`` is (last − first)/(n − 1),
    so its rate is 1000 / that. It stamps with ``time.time()``: its instants are mapped onto
    the monotonic clock with one offset read here. Every stream runs at the same server rate,
    so a match to the wrong stream of the same instant changes nothing.
    """
    server_log(sim.base_url)
    n = level * args.trials
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp, "prompts.json")
        rows = [
            {"prompt": f"write function number {i}", "output_tokens_count": args.tokens}
            for i in range(n)
        ]
        data.write_text(json.dumps(rows))
        out = Path(tmp, "out.json")
        cmd = [
            args.guidellm,
            "run",
            "--backend",
            f"kind=openai_http,target={sim.base_url},model=bench",
            "--profile",
            f"kind=concurrent,streams={level}",
            "--constraint",
            f"kind=max_requests,count={n}",
            "--data",
            f"kind=json_file,path={data}",
            "--output",
            f"kind=json,path={out}",
            "--disable-console",
        ]
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0 or not out.exists():
            return {"level": level, "error": (proc.stderr or proc.stdout)[-400:]}
        report = json.loads(out.read_text())
    log = [e for e in server_log(sim.base_url).values() if e["decode_tok_s"]]
    offset_ns = time.time_ns() - time.perf_counter_ns()
    errs: list[float] = []
    for bench in report.get("benchmarks", []):
        for req in bench.get("requests", {}).get("successful", []):
            itl_ms = req.get("inter_token_latency_ms")
            first = ((req.get("info") or {}).get("timings") or {}).get("first_token_iteration")
            if not itl_ms or first is None:
                continue
            first_mono = first * 1e9 - offset_ns
            s = min(log, key=lambda e: abs(e["first_token_ns"] - first_mono))
            rate = 1000.0 / itl_ms
            errs.append((rate - s["decode_tok_s"]) / s["decode_tok_s"] * 100)
    if not errs:
        return {"level": level, "error": "no per-request rates in GuideLLM's report"}
    return {"level": level, "err": summarize(errs), "n": len(errs)}


def cpu_sides(args: argparse.Namespace) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(server CPUs, client CPUs): as given, or the machine's split in two."""
    cpus = host_cpus()
    if args.server_cpus is None and args.client_cpus is None:
        return split_cpus(cpus, len(cpus) // 2)
    if args.server_cpus is None or args.client_cpus is None:
        raise SystemExit("error: give --server-cpus and --client-cpus together")
    server, client = parse_cpus(args.server_cpus), parse_cpus(args.client_cpus)
    if set(server) & set(client):
        raise SystemExit("error: --server-cpus and --client-cpus must not share a CPU")
    if not set(server + client) <= set(cpus):
        raise SystemExit(f"error: this process may use CPUs {cpus} only")
    return server, client


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="16,64,256,512")
    ap.add_argument("--procs", default="auto", help="client processes per wave (auto: per core)")
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--worst", type=int, default=0, help="print the N worst streams per level")
    ap.add_argument("--server-cpus", help="the simulator's CPUs, e.g. 1 or 2-3")
    ap.add_argument("--client-cpus", help="the client's CPUs, e.g. 0 or 0-1")
    ap.add_argument("--guidellm", help="path to a guidellm executable to compare against")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    server_cpus, client_cpus = cpu_sides(args)
    rows = []
    with (
        SimProcess({"profiles": [PROFILE]}) as sim,
        pinned(sim.proc.pid, server_cpus, client_cpus) as is_pinned,
    ):
        for level in levels:
            rows.append(sparkcap_level(sim, level, args))
        gl = [guidellm_level(sim, lv, args) for lv in levels] if args.guidellm else []
    if is_pinned:
        print(
            f"simulator on CPU {','.join(map(str, server_cpus))}; client (this process and its "
            f"workers) on CPU {','.join(map(str, client_cpus))}"
        )
    else:
        client_cpus = host_cpus()
        print(f"not pinned: simulator and client share CPU {','.join(map(str, client_cpus))}")
    print(f"client processes: {args.procs}; {args.tokens} tokens at {TOK_S:.0f} tok/s per stream")
    print(
        f"{'streams':>7} {'|err| med %':>11} {'p95 %':>6} {'max %':>6} {'signed %':>8} "
        f"{'late 1st/last ms':>16} {'skew ms':>8} {'lag p99 ms':>10} {'CPU % / proc':>14} spoiled"
    )
    lag_ceiling = clean_ceiling = 0
    still_clean = True
    for row in rows:
        e = row["err"]
        skew = max(w["start_skew_ms"] or 0 for w in row["waves"])
        lag = max(w["lag_p99_ms"] for w in row["waves"])
        cpus = [c for w in row["waves"] for c in w["cpu_pct"] if c is not None]
        spoiled = [w["spoiled"] for w in row["waves"] if w["spoiled"]]
        if lag < LAG_CEILING_MS:
            lag_ceiling = max(lag_ceiling, row["level"])
        still_clean = still_clean and not spoiled
        if still_clean:
            clean_ceiling = row["level"]
        print(
            f"{row['level']:>7} {e['median']:>11.3f} {e['p95']:>6.3f} {e['max']:>6.3f} "
            f"{e['signed']:>+8.3f} {row['late_first_ms']:>7.2f}/{row['late_last_ms']:<8.2f} "
            f"{skew:>8.2f} {lag:>10.2f} {max(cpus, default=0):>14.0f} "
            f"{len(spoiled)}/{len(row['waves'])}" + (f" ({spoiled[0]})" if spoiled else "")
        )
    n_cores = len(client_cpus)
    print(
        f"ceiling (no wave client-spoiled, dbt's tolerances): {clean_ceiling} streams on "
        f"{n_cores} client core{'s' if n_cores > 1 else ''} = {clean_ceiling / n_cores:g} per core"
    )
    print(
        f"ceiling (loop lag p99 < {LAG_CEILING_MS:.0f} ms in every process): {lag_ceiling} "
        f"streams = {lag_ceiling / n_cores:g} per client core"
    )
    for g in gl:
        if "error" in g:
            print(f"GuideLLM {g['level']:>4} streams: failed: {g['error']}")
        else:
            e = g["err"]
            print(
                f"GuideLLM {g['level']:>4} streams ({g['n']} requests): |err| median "
                f"{e['median']:.3f} % p95 {e['p95']:.3f} % max {e['max']:.3f} % "
                f"signed {e['signed']:+.3f} %"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
