"""The ``sparkcap`` command line. Thin: every command calls library functions.

Bad input ends with one ``error: ...`` line on stderr and a non-zero exit (2 for usage
errors, 1 for everything else); secrets are never echoed.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from pydantic import ValidationError
from pydantic_settings import SettingsError
from rich import box
from rich.console import Console
from rich.table import Table

from sparkcap import __version__
from sparkcap.config import (
    Deployment,
    ProbeName,
    Profile,
    SearchPlan,
    SweepPlan,
    SweepRequest,
    WorkloadName,
    parse_extra_body,
    parse_header_options,
    probe_options,
)
from sparkcap.errors import SparkcapError
from sparkcap.night.progress import text_console, visible
from sparkcap.settings import get_settings

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Measure how many concurrent streams an LLM fleet sustains at an interactive rate.",
)
err = text_console(stderr=True, soft_wrap=True)


def _print_version(value: bool) -> None:
    if value:
        print(f"sparkcap {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="print the version and exit"
        ),
    ] = False,
) -> None:
    """Measure how many concurrent streams an LLM fleet sustains at an interactive rate."""


out = text_console(width=None if sys.stdout.isatty() else 120, soft_wrap=not sys.stdout.isatty())


class CLIError(SparkcapError):
    """A user-facing failure: printed as one line, exit status 1."""


class Interrupted(CLIError):
    """Ctrl-C: one line saying what was kept, exit status 130 (the shell's 128 + SIGINT)."""


def _db(db: Path | None) -> Path:
    return db if db is not None else get_settings().db_path


def _validation_line(exc: ValidationError) -> str:
    e = exc.errors()[0]
    loc = ".".join(str(x) for x in e["loc"]) or "input"
    more = f" (+{len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"invalid {loc}: {e['msg']}{more}"


SearchFlag = Annotated[
    bool,
    typer.Option(
        "--search",
        help="search for the largest passing concurrency (doubling, then bisection; trials "
        "until the level's interval clears the threshold) instead of the grid of levels",
    ),
]
MaxLevel = Annotated[
    int | None, typer.Option(help="--search: highest concurrency tried (default 32)")
]
TrialsMax = Annotated[
    int | None, typer.Option(help="--search: counted trials a level may take (default 3)")
]
Confidence = Annotated[
    float | None,
    typer.Option(help="--search: confidence of a level's interval (default 0.9)"),
]
SustainFactor = Annotated[
    float | None,
    typer.Option(
        help="--search: the sustain wave's length as a multiple of the output (default 1; 0: none)"
    ),
]
TrialTokens = Annotated[
    int | None,
    typer.Option(
        help="--search: output tokens of a trial (default: a quarter of each stream's length, "
        "at least 32; the sustain wave runs the full length x the sustain factor)"
    ),
]


def search_plan(
    search: bool,
    max_level: int | None = None,
    trials_max: int | None = None,
    confidence: float | None = None,
    sustain_factor: float | None = None,
    trial_tokens: int | None = None,
) -> SearchPlan | None:
    """The CLI's search options as a plan; an option without ``--search`` is a mistake."""
    given = {
        "max_level": max_level,
        "trials_max": trials_max,
        "confidence": confidence,
        "sustain_factor": sustain_factor,
        "trial_tokens": trial_tokens,
    }
    given = {k: v for k, v in given.items() if v is not None}
    if not search:
        if given:
            names = ", ".join("--" + k.replace("_", "-") for k in given)
            verb = "applies" if len(given) == 1 else "apply"
            raise CLIError(f"{names} {verb} only with --search")
        return None
    return SearchPlan(**given)


def run_with_progress(requests: list[SweepRequest], db: Path, **kwargs: Any) -> Any:
    from sparkcap.night.progress import NightProgress, planned_waves
    from sparkcap.night.sweeps import run_interruptibly, run_sweeps

    with NightProgress(planned_waves(requests)) as board:
        return run_interruptibly(run_sweeps(requests, db, progress=board, **kwargs))


OutputFormat = Literal["table", "csv", "json"]
LEVEL_COLUMNS = (
    "deployment",
    "workload",
    "concurrency",
    "n_valid_trials",
    "n_trials",
    "median_decode_tok_s",
    "min_decode_tok_s",
    "median_ttft_s",
    "n_failed_streams",
    "any_queued",
)
CAPACITY_COLUMNS = (
    "deployment",
    "workload",
    "threshold_tok_s",
    "capacity_streams",
    "is_lower_bound",
    "is_below_lowest_level",
    "first_failing_level",
    "method",
    "level_capacity_streams",
    "search_low_streams",
    "search_high_streams",
    "n_straddling_levels",
    "sustain_result",
    "is_measured",
    "capacity_verdict",
)


def print_levels(db: Path, run_id: str, fmt: OutputFormat = "table") -> None:
    """The run's levels and capacities as the marts have them (build the run first): the CLI
    applies no rule of its own, so what it prints is what the report and SQL users see."""
    from sparkcap.store.warehouse import open_warehouse

    with open_warehouse(db, read_only=True) as con:
        levels = con.execute(
            f"select {', '.join(LEVEL_COLUMNS)} from marts.fct_levels where run_id = ? "
            "order by deployment, workload, concurrency",
            [run_id],
        ).fetchall()
        capacities = con.execute(
            f"select {', '.join(CAPACITY_COLUMNS)} from marts.fct_capacity where run_id = ? "
            "order by deployment, workload",
            [run_id],
        ).fetchall()
    if fmt != "table":
        _print_machine_readable(run_id, levels, capacities, fmt)
        return
    # short headers with units, light borders: readable at 80 columns
    table = Table(title=f"run {run_id}", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0))
    for col, justify in (
        ("deployment", "left"),
        ("workload", "left"),
        ("streams", "right"),
        ("valid", "right"),
        ("med tok/s", "right"),
        ("min tok/s", "right"),
        ("TTFT s", "right"),
        ("failed", "right"),
        ("queued", "left"),
    ):
        table.add_column(col, justify=justify, no_wrap=True)  # type: ignore[arg-type]

    def f(x: float | None, nd: int = 1) -> str:
        return "—" if x is None else f"{x:.{nd}f}"

    for dep, wl, conc, n_valid, n_trials, med, mn, ttft, failed, queued in levels:
        table.add_row(
            dep,
            wl,
            str(conc),
            f"{n_valid}/{n_trials}",
            f(med),
            f(mn),
            f(ttft, 2),
            str(failed),
            "yes" if queued else "",
        )
    out.print(table)
    for row in capacities:
        c = dict(zip(CAPACITY_COLUMNS, row, strict=True))
        t = float(c["threshold_tok_s"])  # DuckDB may hand back a DECIMAL: print 15, not 15.0
        pair = f"{c['deployment']}/{c['workload']}"
        # the mart words the verdict ("no valid measurement at level 1: …" is not "below")
        out.print(f"capacity at {t:g} tok/s — {pair}: {c['capacity_verdict']}", highlight=False)


def _print_machine_readable(
    run_id: str, levels: list[Any], capacities: list[Any], fmt: OutputFormat
) -> None:
    """Levels and capacities for scripts: JSON (both tables) or CSV (one row per level, with
    its deployment × workload's capacity). Only the data goes to stdout."""
    lv = [dict(zip(LEVEL_COLUMNS, r, strict=True)) for r in levels]
    caps = [dict(zip(CAPACITY_COLUMNS, r, strict=True)) for r in capacities]
    if fmt == "json":
        doc = {"run_id": run_id, "levels": lv, "capacity": caps}
        sys.stdout.write(json.dumps(doc, default=float) + "\n")
        return
    by_pair = {(c["deployment"], c["workload"]): c for c in caps}
    w = csv.writer(sys.stdout)
    extra = ("threshold_tok_s", "capacity_streams", "is_lower_bound", "capacity_verdict")
    w.writerow(["run_id", *LEVEL_COLUMNS, *extra])
    for row in lv:
        c = by_pair.get((row["deployment"], row["workload"]), {})
        w.writerow([run_id, *row.values(), *(c.get(k) for k in extra)])


def print_fleet(db: Path, run_id: str, console: Console | None = None) -> None:
    """The headline from the marts (the numbers the report shows)."""
    from sparkcap.store.warehouse import open_warehouse

    with open_warehouse(db, read_only=True) as con:
        rows = con.execute(
            "select workload, capacity_streams, threshold_tok_s, extrapolated_deployments, "
            "not_measured_deployments from marts.fct_fleet_capacity where run_id = ? "
            "order by workload",
            [run_id],
        ).fetchall()
    for wl, cap, t, extra, missing in rows:
        note = f" (replicas extrapolated: {extra})" if extra else ""
        note += f" (partial: {missing} not measured)" if missing else ""
        (console or out).print(
            f"fleet capacity at {float(t):g} tok/s — {wl}: {cap} streams{note}", highlight=False
        )


@app.command()
def sweep(
    endpoint: Annotated[
        str, typer.Option(help="OpenAI-compatible base URL, e.g. http://h:8000/v1")
    ],
    model: Annotated[str, typer.Option(help="model name the server serves")],
    workload: Annotated[WorkloadName, typer.Option(help="which prompts")],
    deployment: Annotated[str | None, typer.Option(help="deployment name (default: model)")] = None,
    levels: Annotated[str, typer.Option(help="concurrency levels")] = "1,2,4,8,16",
    trials: Annotated[int, typer.Option(help="counted trials per level (1..5)")] = 3,
    no_warmup: Annotated[bool, typer.Option("--no-warmup", help="skip warm-up waves")] = False,
    max_tokens: Annotated[int | None, typer.Option(help="override the required length")] = None,
    max_remeasures: Annotated[
        int, typer.Option(help="extra attempts for a wave the client's own timing spoiled (0..5)")
    ] = 2,
    client_processes: Annotated[
        int | None,
        typer.Option(
            help="load-generating processes per wave (default: one per core; 1 runs every "
            "stream in this process)",
            min=1,
            max=256,
        ),
    ] = None,
    api_key_env: Annotated[str, typer.Option(help="variable holding the API key")] = (
        "OPENAI_API_KEY"
    ),
    extra_body: Annotated[str | None, typer.Option(help="JSON merged into each request")] = None,
    header: Annotated[
        list[str] | None,
        typer.Option(
            help="extra request header NAME:VALUE, or NAME:env:VAR to read the value from VAR "
            "(repeatable; values are secrets: never stored, only names)"
        ),
    ] = None,
    ca_bundle: Annotated[Path | None, typer.Option(help="CA bundle for TLS verification")] = None,
    continuous_usage: Annotated[
        bool, typer.Option(help="ask for per-chunk usage (vLLM continuous_usage_stats)")
    ] = False,
    db: Annotated[Path | None, typer.Option(help="DuckDB file")] = None,
    fmt: Annotated[
        OutputFormat, typer.Option("--format", help="levels as a table, csv or json (stdout)")
    ] = "table",
    run: Annotated[
        str | None,
        typer.Option(help="add this sweep to run ID (or 'latest') instead of starting a new one"),
    ] = None,
    search: SearchFlag = False,
    max_level: MaxLevel = None,
    trials_max: TrialsMax = None,
    confidence: Confidence = None,
    sustain_factor: SustainFactor = None,
    trial_tokens: TrialTokens = None,
) -> None:
    """Sweep one deployment with synchronized waves and record every token timestamp."""
    searching = search_plan(search, max_level, trials_max, confidence, sustain_factor, trial_tokens)
    try:
        headers, header_env = parse_header_options(header)
        extra = parse_extra_body(extra_body)
    except ValueError as exc:  # the message never echoes a header's value
        raise CLIError(str(exc)) from None
    req = SweepRequest(
        deployment=Deployment(
            name=deployment or _safe_name(model),
            endpoint=endpoint,
            model=model,
            api_key_env=api_key_env,
            extra_body=extra,
            headers=headers,  # pydantic wraps the values in SecretStr
            header_env=header_env,
            ca_bundle=ca_bundle,
            continuous_usage=continuous_usage,
        ),
        workload=workload,
        plan=SweepPlan(
            levels=levels,
            trials=trials,
            warmup=not no_warmup,
            max_tokens=max_tokens,
            max_remeasures=max_remeasures,
            client_processes=client_processes,
            search=searching,
        ),
    )
    path = _db(db)
    from sparkcap.loadgen.sweep import new_run_id

    if run is not None:
        from sparkcap.night.sweeps import open_run_for

        run_id = open_run_for(path, run, req.deployment.name, [req.workload])
    else:
        run_id = new_run_id()  # known before the sweep, so that a Ctrl-C can name it
    from sparkcap.publish.marts import unmeasured_pairs
    from sparkcap.transform.dbt_build import build as dbt_build

    say = out if fmt == "table" else err  # csv/json: only the data on stdout
    try:
        result = run_with_progress([req], path, run_id=run_id)
        say.print(f"run id: {result.run_id}", highlight=False)
        dbt_build(path)  # incremental: the new run only; the marts are what the CLI prints
    except KeyboardInterrupt:
        raise Interrupted(interrupted_line(path, run_id)) from None
    print_levels(path, result.run_id, fmt)
    say.print(f"database: {path}", highlight=False)
    if result.status != "complete":
        err.print(f"error: run {result.run_id} is incomplete: {result.reason}", highlight=False)
        raise typer.Exit(1)
    for dep_name, wl, verdict in unmeasured_pairs(path, result.run_id):
        if (dep_name, wl) == (req.deployment.name, req.workload):
            raise CLIError(f"run {result.run_id}: {dep_name}/{wl} measured nothing: {verdict}")


def interrupted_line(db: Path, run_id: str) -> str:
    """What a Ctrl-C leaves, for its one error line: the run as recorded and the waves staged
    before it (kept; the wave in flight is no measurement), or that nothing was recorded."""
    from sparkcap.store.warehouse import open_warehouse

    try:
        with open_warehouse(db, read_only=True) as con:
            run = con.execute("select status from raw.runs where run_id = ?", [run_id]).fetchone()
            waves = con.execute(
                "select count(*) from raw.waves where run_id = ?", [run_id]
            ).fetchone()
    except Exception:  # a busy or missing file: say what is certain
        return f"interrupted (Ctrl-C): run {run_id} stopped; the waves it staged are kept"
    if run is None:
        return "interrupted (Ctrl-C) before the run started; nothing was recorded"
    n = int(waves[0]) if waves else 0
    if run[0] == "complete":  # after the sweep: building or reporting was cut short
        return (
            f"interrupted (Ctrl-C) after the sweep: run {run_id} and its {n} wave(s) are "
            "recorded (`sparkcap build`, then `sparkcap report`, finish it)"
        )
    return (
        f"interrupted (Ctrl-C): run {run_id} is marked {run[0]}; its {n} staged wave(s) "
        "are kept (`sparkcap build` builds them)"
    )


def _safe_name(model: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_.\-]+", "-", model).strip("-") or "deployment"


@app.command()
def probe(
    name: Annotated[ProbeName, typer.Argument(help="which probe")],
    endpoint: Annotated[str, typer.Option(help="OpenAI-compatible base URL")],
    model: Annotated[str, typer.Option(help="model name the server serves")],
    deployment: Annotated[str | None, typer.Option(help="deployment name (default: model)")] = None,
    prompt_tokens: Annotated[
        int, typer.Option(help="long prompt / document length in tokens")
    ] = 4000,
    background_streams: Annotated[int, typer.Option(help="decode streams held")] = 4,
    background_tokens: Annotated[int, typer.Option(help="their output length")] = 400,
    probe_interval: Annotated[float, typer.Option(help="seconds between probe requests")] = 0.5,
    warm_requests: Annotated[int, typer.Option(help="warm repeats (prompt-cache)")] = 3,
    concurrency: Annotated[int, typer.Option(help="streams (output-length, mixed)")] = 8,
    lengths: Annotated[str, typer.Option(help="output lengths (output-length)")] = "400,1000",
    workload: Annotated[WorkloadName, typer.Option(help="prompts (output-length)")] = "prose",
    code_share: Annotated[float, typer.Option(help="share of code streams (mixed)")] = 0.5,
    trials: Annotated[int, typer.Option(help="counted waves (output-length, mixed)")] = 2,
    max_tokens: Annotated[int | None, typer.Option(help="output length (mixed)")] = None,
    api_key_env: Annotated[str, typer.Option(help="variable holding the API key")] = (
        "OPENAI_API_KEY"
    ),
    extra_body: Annotated[str | None, typer.Option(help="JSON merged into each request")] = None,
    db: Annotated[Path | None, typer.Option(help="DuckDB file")] = None,
) -> None:
    """Measure what long prefills and prompt caches do to responsiveness."""
    from sparkcap.night.progress import live_ttft_s
    from sparkcap.night.sweeps import run_interruptibly, run_probe

    try:
        extra = parse_extra_body(extra_body)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    dep = Deployment(
        name=deployment or _safe_name(model),
        endpoint=endpoint,
        model=model,
        api_key_env=api_key_env,
        extra_body=extra,
    )
    # each probe takes its own options; the shared flags map onto them here (one model each)
    given: dict[str, dict[str, Any]] = {
        "prefill-interference": {
            "background_streams": background_streams,
            "background_tokens": background_tokens,
            "long_prompt_tokens": prompt_tokens,
            "probe_interval_s": probe_interval,
        },
        "prompt-cache": {"document_tokens": prompt_tokens, "warm_requests": warm_requests},
        "output-length": {
            "concurrency": concurrency,
            "lengths": [x for x in lengths.split(",") if x.strip()],
            "workload": workload,
            "trials": trials,
        },
        "mixed": {
            "concurrency": concurrency,
            "code_share": code_share,
            "trials": trials,
            "max_tokens": max_tokens,
        },
    }
    options = probe_options(name, **given[name])
    path = _db(db)
    result = run_interruptibly(run_probe(dep, options, path))
    out.print(f"run id: {result.run_id}", highlight=False)
    for r in [r for w in result.waves[:1] for r in w.requests]:
        if r.role in ("background", "code", "prose"):
            continue
        ttft_s = live_ttft_s(r)
        ttft = "—" if ttft_s is None else f"{ttft_s:.2f} s"
        out.print(
            f"{r.role:8} sent {(r.sent_ns or 0) / 1e9:6.2f} s  live TTFT {ttft:>9}  prompt "
            f"{r.prompt_tokens} tok, cached {r.cached_prompt_tokens}  {r.status.value}",
            highlight=False,
        )
    out.print(
        f"database: {path} (run `sparkcap build`, then see marts.fct_{name.replace('-', '_')})",
        highlight=False,
    )


@app.command("link-check")
def link_check(
    fleet: Annotated[Path, typer.Option(help="fleet file with deployments' links")],
    db: Annotated[Path | None, typer.Option(help="DuckDB file")] = None,
) -> None:
    """Run each declared link's probe command and record achieved vs nominal Gb/s."""
    from sparkcap.config.fleet import load_fleet
    from sparkcap.night.sweeps import run_link_check

    fl = load_fleet(fleet)
    run_id, results = run_link_check(fl, _db(db))
    out.print(f"run id: {run_id}", highlight=False)
    for r in results:
        got = "—" if r.achieved_gbps is None else f"{r.achieved_gbps:.2f} Gb/s"
        state = {True: "ok", False: "UNHEALTHY", None: "FAILED"}[r.healthy]
        out.print(
            f"{r.deployment}/{r.spec.name}: {got} of {r.spec.nominal_gbps:g} nominal — "
            f"{state}" + (f" ({r.error})" if r.error else ""),
            highlight=False,
        )
    if any(r.healthy is not True for r in results):
        raise typer.Exit(1)


@app.command("compare")
def compare_cmd(
    run_a: Annotated[str, typer.Argument(help="the earlier run")],
    run_b: Annotated[str, typer.Argument(help="the later run")],
    db: Annotated[Path | None, typer.Option(help="DuckDB file")] = None,
    fmt: Annotated[
        OutputFormat, typer.Option("--format", help="tables, csv (one block each) or json")
    ] = "table",
) -> None:
    """Before/after: change in median rate, aggregate throughput, prefill, capacity, links."""
    from sparkcap.publish.compare import compare

    frames = compare(_db(db), run_a, run_b)
    if fmt == "json":
        doc = {n: json.loads(f.to_json(orient="records")) for n, f in frames.items()}
        sys.stdout.write(json.dumps({"before": run_a, "after": run_b, **doc}) + "\n")
        return
    if fmt == "csv":
        for name, frame in frames.items():
            sys.stdout.write(f"# {name}\n")
            frame.to_csv(sys.stdout, index=False)
        return
    for name, frame in frames.items():
        table = Table(title=f"{name.replace('_', ' ')}: {run_a} → {run_b}")
        for c in frame.columns:
            table.add_column(c)
        for row in frame.itertuples(index=False):
            table.add_row(
                *(
                    "—"
                    if v is None or (isinstance(v, float) and v != v)
                    else f"{v:.1f}"
                    if isinstance(v, float)
                    else str(v)
                    for v in row
                )
            )
        out.print(table)


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="SQL to run read-only")],
    db: Annotated[Path | None, typer.Option(help="DuckDB file")] = None,
    format: Annotated[OutputFormat, typer.Option(help="how rows are printed")] = "table",
) -> None:
    """Run ad-hoc SQL against the warehouse, read-only."""
    import duckdb

    from sparkcap.store.warehouse import open_warehouse

    with open_warehouse(_db(db), read_only=True) as con:
        try:
            cur = con.execute(query)
        except duckdb.Error as exc:
            raise CLIError(f"SQL failed: {str(exc).splitlines()[0]}") from None
        if cur.description is None:
            return
        cols = [d[0] for d in cur.description]
        rows = cur.fetchall()
    if format == "csv":
        w = csv.writer(sys.stdout)
        w.writerow(cols)
        w.writerows(rows)
    elif format == "json":
        sys.stdout.write(json.dumps([dict(zip(cols, r, strict=True)) for r in rows], default=str))
        sys.stdout.write("\n")
    else:
        table = Table()
        for c in cols:
            table.add_column(c)
        for r in rows:
            table.add_row(*("NULL" if v is None else visible(str(v)) for v in r))
        out.print(table)


@app.command()
def sim(
    port: Annotated[int, typer.Option(help="port on 127.0.0.1 (0 = any free port)")] = 8000,
) -> None:
    """Serve the simulated twin of the study's fleet (models: qwen, glm, deepseek)."""
    from sparkcap.servers.sim.fleet import twin_profiles
    from sparkcap.servers.sim.server import SimServer

    server = SimServer(twin_profiles(), port=port)
    print(
        json.dumps({"endpoint": server.endpoint, "models": ["qwen", "glm", "deepseek"]}), flush=True
    )
    server.serve_forever()


def load_nightly_flow() -> Any:
    """The flow object from ``flows/nightly.py`` (the same file ``prefect.yaml`` deploys)."""
    import importlib.util

    from sparkcap.settings import prepare_prefect_env

    prepare_prefect_env()
    from sparkcap.resources import nightly_flow_file

    path = nightly_flow_file()
    spec = importlib.util.spec_from_file_location("sparkcap_nightly_flow", path)
    if spec is None or spec.loader is None:
        raise CLIError(f"cannot load the nightly flow from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.nightly_fleet_sweep


@app.command()
def run(
    fleet: Annotated[Path, typer.Option(help="fleet file (YAML)")],
    db: Annotated[Path | None, typer.Option(help="DuckDB file")] = None,
    profile: Annotated[Profile, typer.Option(help="how much of the fleet file's plan to run")] = (
        "full"
    ),
    reports: Annotated[Path | None, typer.Option(help="report folder")] = None,
    no_prefect: Annotated[
        bool, typer.Option("--no-prefect", help="run the same steps without Prefect")
    ] = False,
    fmt: Annotated[
        OutputFormat, typer.Option("--format", help="levels as a table, csv or json (stdout)")
    ] = "table",
    search: SearchFlag = False,
    max_level: MaxLevel = None,
    trials_max: TrialsMax = None,
    confidence: Confidence = None,
    sustain_factor: SustainFactor = None,
    trial_tokens: TrialTokens = None,
    distributed: Annotated[
        bool | None,
        typer.Option(
            "--distributed/--embedded",
            help="sweep on the fleet's Prefect work pool, one child flow run per deployment x "
            "workload, landing in the lake (default: the fleet file's distributed.enabled)",
        ),
    ] = None,
    finish: Annotated[
        str | None,
        typer.Option(
            help="finish the distributed night RUN_ID whose parent stopped: stage what its "
            "children landed in the lake, name what is missing, validate, build, report",
            metavar="RUN_ID",
        ),
    ] = None,
) -> None:
    """Run the nightly pipeline once: sweep, stage, validate, build, report."""
    from sparkcap.loadgen.sweep import new_run_id
    from sparkcap.night import plan as night_plan
    from sparkcap.night import progress as night_progress
    from sparkcap.night import steps as pipeline

    searching = search_plan(search, max_level, trials_max, confidence, sustain_factor, trial_tokens)
    search_opts = searching.model_dump() if searching is not None else None
    # validates the fleet file before anything starts
    fl = night_plan.fleet_for(fleet, profile, search=search_opts)
    spread = fl.distributed.enabled if distributed is None else distributed
    if finish is not None and (searching is not None or distributed is False):
        raise CLIError(
            "--finish takes the night as its children swept it: leave out --embedded and "
            "the search options"
        )
    if spread and no_prefect and finish is None:
        raise CLIError("--distributed runs on Prefect workers: leave out --no-prefect")
    if spread and finish is None:
        from sparkcap.night.distributed import DistributedError, check_budgets, require_server

        try:
            check_budgets(fl)
            require_server()
        except DistributedError as exc:
            raise CLIError(str(exc)) from None
    path = _db(db).resolve()
    if finish is not None:  # refused here, before anything starts, as the step would refuse
        from sparkcap.night.distributed import DistributedError, children_to_finish

        try:
            children_to_finish(fl, path, finish)
        except DistributedError as exc:
            raise CLIError(str(exc)) from None
    reports_dir = (reports or get_settings().reports_dir).resolve()
    run_id = finish or new_run_id()
    result: dict[str, Any] | None = None
    state: Any = None
    board = night_progress.NightProgress(fl.planned_waves())
    try:
        with board:
            # the first line, at once: what runs, where it lands, where the report will be
            board.line(
                f"run id: {run_id} · fleet {fl.name} ({len(fl.deployments)} deployments, "
                f"{'no Prefect' if no_prefect else 'Prefect flow'}"
                f"{', distributed on pool ' + fl.distributed.pool if spread else ''}) · "
                f"database {path} · report "
                f"{reports_dir / run_id / 'index.html'}"
            )
            if no_prefect:
                night_progress.add_sink(board)  # the steps' start and end lines
                try:
                    result = pipeline.run_pipeline(
                        fl, path, reports_dir, board, run_id=run_id, finish=finish is not None
                    )
                finally:
                    night_progress.remove_sink(board)
            else:
                flow = load_nightly_flow()
                night_progress.add_sink(board)
                try:
                    state = flow(
                        fleet=str(fleet),
                        db=str(path),
                        profile=profile,
                        reports=str(reports_dir),
                        run_id=run_id,
                        search=search_opts,
                        distributed=spread,
                        finish=finish is not None,
                        return_state=True,
                    )
                finally:
                    night_progress.remove_sink(board)
                result = state.result(raise_on_failure=False) if state.is_completed() else None
    except KeyboardInterrupt:
        raise Interrupted(interrupted_line(path, run_id)) from None
    if result is None:
        _print_after_failed_flow(path, reports_dir, state)
        raise typer.Exit(1)
    say = out if fmt == "table" else err  # csv/json: only the data on stdout
    say.print(f"run id: {result['run_id']}", highlight=False)
    print_levels(path, result["run_id"], fmt)
    print_fleet(path, result["run_id"], say)
    say.print(f"database: {path}", highlight=False)
    say.print(f"report: {result['report']}", highlight=False)
    docs = Path(str(result["report"])).parent / "dq" / "data_docs" / "index.html"
    if docs.exists():
        say.print(f"data docs: {docs}", highlight=False)
    say.print(
        f"open it: python3 -m webbrowser file://{result['report']} (no network needed)",
        highlight=False,
    )
    gaps = result.get("gaps") or []
    for gap in gaps:
        err.print(f"not measured — {gap}", highlight=False)
    if gaps or result.get("run_status", "complete") != "complete":
        err.print(
            f"error: run {result['run_id']} is incomplete: "
            + (
                f"{len(gaps)} part(s) of the night missing (listed above and in the report)"
                if gaps
                else str(result["run_reason"])
            ),
            highlight=False,
        )
        raise typer.Exit(1)
    if result.get("dq_success") is False:
        err.print(f"error: data-quality failed: {', '.join(result['dq_failed'])}", highlight=False)
        raise typer.Exit(1)


def _print_after_failed_flow(path: Path, reports_dir: Path, state: Any) -> None:
    err.print(
        f"error: nightly flow ended {state.type.value.lower()}: {state.message}", highlight=False
    )
    latest = reports_dir / "latest" / "index.html"
    if latest.exists():
        out.print(f"report: {latest}", highlight=False)


@app.command("prefect-yaml")
def prefect_yaml_cmd(
    fleets: Annotated[
        list[Path] | None, typer.Argument(help="fleet files (default: fleets/*.yaml)")
    ] = None,
    target: Annotated[Path, typer.Option("--out", help="file to write")] = Path("prefect.yaml"),
    check: Annotated[
        bool, typer.Option("--check", help="only say whether the file is up to date (exit 1)")
    ] = False,
) -> None:
    """Write prefect.yaml's deployments from the fleet files' schedules (the one source)."""
    from sparkcap.night.schedule import prefect_yaml

    root = target.resolve().parent
    paths = [p.resolve() for p in (fleets or sorted((root / "fleets").glob("*.yaml")))]
    text = prefect_yaml(paths, root)
    if check:
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            raise CLIError(
                f"{target} does not match the fleet files' schedules; run `sparkcap prefect-yaml`"
            )
        out.print(f"{target} is up to date", highlight=False)
        return
    target.write_text(text, encoding="utf-8")
    n = text.count("- name: nightly-")
    out.print(f"wrote {target} ({n} deployments)", highlight=False)


@app.command()
def build(
    db: Annotated[Path | None, typer.Option(help="DuckDB file")] = None,
    full_refresh: Annotated[bool, typer.Option(help="rebuild every night from scratch")] = False,
    threshold: Annotated[float | None, typer.Option(help="tok/s threshold (default 20)")] = None,
    var: Annotated[
        list[str] | None,
        typer.Option(
            "--var",
            help="override a dbt var, NAME=NUMBER (repeatable; e.g. probe_window_s=2, "
            "dip_share=0.3, bootstrap_samples=500)",
        ),
    ] = None,
    unit_tests: Annotated[
        bool, typer.Option(help="also run dbt's unit tests of the formulas (left out nightly)")
    ] = False,
) -> None:
    """Run dbt: stream rates, trial medians, levels, capacities and fleet capacity."""
    from sparkcap.transform.dbt_build import build as dbt_build
    from sparkcap.transform.dbt_build import parse_var_overrides

    dbt_vars: dict[str, Any] = parse_var_overrides(var or [])
    if threshold is not None:
        dbt_vars["threshold_tok_s"] = threshold
    result = dbt_build(
        _db(db), full_refresh=full_refresh, dbt_vars=dbt_vars or None, unit_tests=unit_tests
    )
    out.print(f"dbt build ok: {result.n_nodes} models and tests", highlight=False)


@app.command()
def report(
    db: Annotated[Path | None, typer.Option(help="DuckDB file")] = None,
    run: Annotated[
        list[str] | None,
        typer.Option(
            help="run id (default: the latest built run); repeat it to report several runs "
            "as one (each deployment x workload from the newest run that measured it)"
        ),
    ] = None,
    night: Annotated[
        str | None,
        typer.Option(help="report every built run that started on this UTC date (YYYY-MM-DD)"),
    ] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="report folder")] = None,
) -> None:
    """Render the HTML report (and PNG/SVG charts) of a run, several runs or a night."""
    from datetime import date

    from sparkcap.publish.report import render_report

    if night is not None and run:
        raise typer.BadParameter("give --run or --night, not both", param_hint="--night")
    night_date = None
    if night is not None:
        try:
            night_date = date.fromisoformat(night)
        except ValueError:
            raise typer.BadParameter(
                f"expected a date YYYY-MM-DD, got {night!r}", param_hint="--night"
            ) from None
    result = render_report(_db(db), run or None, out_dir, night=night_date)
    out.print(f"report: {result.index.resolve()}", highlight=False)
    if result.latest is not None:
        out.print(f"latest: {result.latest.resolve()}", highlight=False)


@app.command()
def stage(
    db: Annotated[Path | None, typer.Option(help="DuckDB file")] = None,
    lake: Annotated[
        str | None,
        typer.Option(help="a distributed night's lake (path or fsspec URL): stage its run"),
    ] = None,
    run: Annotated[str | None, typer.Option(help="the run to stage from --lake")] = None,
) -> None:
    """Stage waves left in the spool by an interrupted or blocked run, or (``--lake``,
    ``--run``) a distributed night's lake whose parent stopped before staging it."""
    from sparkcap.store.spool import stage_spool

    if (lake is None) != (run is None):
        raise CLIError("--lake and --run go together")
    n = stage_spool(_db(db))
    out.print(f"staged {n} spooled wave(s)", highlight=False)
    if lake is not None and run is not None:
        from sparkcap.store.lake import Lake, LakeError, stage_lake

        try:
            staged = stage_lake(_db(db), Lake(lake), run)
        except LakeError as exc:
            raise CLIError(str(exc)) from None
        out.print(
            f"staged {staged.staged} wave(s) of run {run} from {lake} "
            f"({staged.already} already there)",
            highlight=False,
        )
        for wave_id, why in staged.rejected.items():
            err.print(f"not staged — {wave_id}: {why}", highlight=False)
        if staged.rejected:
            raise typer.Exit(1)


@app.command()
def validate(
    db: Annotated[Path | None, typer.Option(help="DuckDB file")] = None,
    run: Annotated[
        str | None, typer.Option(help="run id (default: the newest run with sweep waves)")
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="folder for the data-quality pages")
    ] = None,
    prose_tolerance: Annotated[
        float, typer.Option(help="prose may be this share shorter than requested")
    ] = 0.05,
    max_failure_rate: Annotated[
        float, typer.Option(help="ceiling on failed streams per counted trial")
    ] = 0.1,
) -> None:
    """Run the data-quality suites on a run; exit 1 if a blocking expectation fails."""
    from sparkcap.dq.validate import DQConfig, run_validation

    cfg = DQConfig(prose_length_tolerance=prose_tolerance, max_failure_rate=max_failure_rate)
    result = run_validation(_db(db), run, config=cfg, docs_dir=out_dir)
    out.print(f"run {result.run_id}", highlight=False)
    for o in result.outcomes:
        mark = "ok  " if o.success else ("FAIL" if o.blocking else "warn")
        extra = ""
        if not o.success:
            extra = f" — {o.unexpected_count} offending, e.g. {', '.join(o.sample_ids[:3])}"
        out.print(f"{mark} {o.suite}.{o.expectation}{extra}", highlight=False)
    if result.summary_page is not None:
        out.print(f"summary: {result.summary_page}", highlight=False)
    if result.data_docs_index is not None:
        out.print(f"data docs: {result.data_docs_index}", highlight=False)
    if not result.success:
        names = ", ".join(sorted({o.expectation for o in result.blocking_failures}))
        err.print(
            f"error: blocking expectations failed for run {result.run_id}: {names}", highlight=False
        )
        raise typer.Exit(1)


@app.command()
def demo(
    db: Annotated[Path | None, typer.Option(help="DuckDB file")] = None,
    fleet: Annotated[
        Path | None, typer.Option(help="fleet file (default: the twin fleet shipped with sparkcap)")
    ] = None,
    reports: Annotated[Path | None, typer.Option(help="report folder")] = None,
) -> None:
    """The nightly flow on the simulated twin fleet with the demo profile; prints the report."""
    from sparkcap.resources import bundled_fleet

    fleet = fleet or bundled_fleet("twin")
    run(fleet=fleet, db=db, profile="demo", reports=reports, no_prefect=False, fmt="table")


@app.command("local-server")
def local_server_cmd(
    port: Annotated[int, typer.Option(help="port on 127.0.0.1 (0 = any free port)")] = 8080,
    slots: Annotated[int, typer.Option(help="parallel slots (-np)")] = 4,
    context: Annotated[int, typer.Option(help="total context (-c), shared by the slots")] = 8192,
    threads: Annotated[int | None, typer.Option(help="CPU threads")] = None,
    spec_type: Annotated[str | None, typer.Option(help="e.g. ngram-simple")] = None,
    build_only: Annotated[bool, typer.Option(help="build and fetch the model, then exit")] = (
        False
    ),
) -> None:
    """Build (once) and run llama.cpp's llama-server with Gemma 3 270M on loopback."""
    import signal
    import threading

    from sparkcap.servers.llama import ensure_model, ensure_server_binary, start_local_server

    binary = ensure_server_binary()
    model = ensure_model()
    if build_only:
        out.print(f"llama-server: {binary}\nmodel: {model}", highlight=False)
        return
    server = start_local_server(
        port=port, slots=slots, context=context, threads=threads, spec_type=spec_type
    )
    out.print(
        f"llama-server ready: {server.endpoint} (model gemma-3-270m, {slots} slots); "
        f"log {server.log_path}; Ctrl-C stops it",
        highlight=False,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.is_set() and server.process.poll() is None:
            stop.wait(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    if server.process.returncode not in (0, -15, None) and not stop.is_set():
        raise CLIError(f"llama-server exited with {server.process.returncode}")


def main(argv: list[str] | None = None) -> None:
    command = typer.main.get_command(app)
    try:
        rv = command.main(args=argv, prog_name="sparkcap", standalone_mode=False)
        if rv == 130:  # typer turns a Ctrl-C no command caught into Exit(130), silently
            err.print("error: interrupted (Ctrl-C)", highlight=False)
            raise SystemExit(130)
        if isinstance(rv, int) and rv != 0:  # a command's Exit(n) comes back as a value
            raise SystemExit(rv)
    except typer.Exit as exc:
        code = getattr(exc, "exit_code", exc.args[0] if exc.args else 0)
        raise SystemExit(code) from None
    except typer.Abort:
        err.print("error: aborted", highlight=False)
        raise SystemExit(130) from None
    except typer.TyperException as exc:  # usage errors (typer vendors click's exceptions)
        msg = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        msg = msg.replace(": Value error, ", ": ")  # typer's wording for a Literal choice
        param = getattr(exc, "param", None)
        opts = getattr(param, "opts", None) or [getattr(param, "name", "")]
        hint = getattr(exc, "param_hint", None) or opts[0]
        prefix = f"invalid {hint}: " if hint and isinstance(hint, str) and hint not in msg else ""
        err.print(f"error: {prefix}{msg}", highlight=False, soft_wrap=True)
        raise SystemExit(getattr(exc, "exit_code", 2)) from None
    except ValidationError as exc:
        err.print(f"error: {_validation_line(exc)}", highlight=False, soft_wrap=True)
        raise SystemExit(2) from None
    except Interrupted as exc:
        err.print(f"error: {exc}", highlight=False, soft_wrap=True)
        raise SystemExit(130) from None
    except (
        SparkcapError,  # every error sparkcap words for a person (sparkcap/errors.py)
        LookupError,  # a missing key or variable a library names
        FileNotFoundError,
        SettingsError,  # an environment variable sparkcap reads is malformed
    ) as exc:
        err.print(f"error: {exc}", highlight=False, soft_wrap=True)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        err.print("error: interrupted", highlight=False)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
