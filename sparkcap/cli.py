"""The ``sparkcap`` command line: it parses options into sparkcap's models, calls one library
function per command and prints what comes back (:mod:`sparkcap.publish.text` words it).

Bad input ends with one ``error: ...`` line on stderr and a non-zero exit (2 for usage
errors, 1 for everything else); secrets are never echoed.

Start-up: ``sparkcap --help`` takes ~0.3 s, nearly all of it typer, Rich and pydantic. A
command's heavy stage is imported where the command starts, each with its measured cost on top
of this module (2 shared cores): DuckDB and Arrow come with the warehouse (a test keeps them,
and ``night.steps``, out of ``import sparkcap.cli``), Prefect with a night.
"""

from __future__ import annotations

import json
import sys
from datetime import date
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from pydantic_settings import SettingsError

from sparkcap import __version__
from sparkcap.config import (
    Deployment,
    ProbeName,
    Profile,
    SweepPlan,
    SweepRequest,
    WorkloadName,
    deployment_name,
    parse_extra_body,
    parse_header_options,
    probe_flags,
    search_plan,
)
from sparkcap.config.fleet import load_fleet
from sparkcap.errors import SparkcapError
from sparkcap.night.progress import probe_lines
from sparkcap.publish import text
from sparkcap.publish.text import OutputFormat, capacity_words, fleet_line, text_console
from sparkcap.resources import bundled_fleet
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
    try:
        get_settings()  # the environment, checked once before a command reads it anywhere
    except SettingsError as exc:  # pydantic-settings' own (SPARKCAP_DBT_VARS not JSON)
        raise CLIError(str(exc)) from None


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


def _interrupted(db: Path, run_id: str) -> Interrupted:
    from sparkcap.publish import marts  # +0.24 s (DuckDB, Arrow)

    return Interrupted(text.interrupted_line(run_id, marts.recorded_run(db, run_id)))


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


def print_levels(db: Path, run_id: str, fmt: OutputFormat = "table") -> None:
    """The run's levels and capacities as the marts have them (build the run first): the CLI
    applies no rule of its own, so what it prints is what the report and SQL users see."""
    from sparkcap.publish import marts  # +0.24 s (DuckDB, Arrow)

    levels, caps = marts.levels(db, run_id), marts.capacities(db, run_id)
    text.print_levels(out, sys.stdout, run_id, levels, caps, fmt)


def print_fleet(db: Path, run_id: str, console: Any = None) -> None:
    """The headline from the marts (the numbers the report shows)."""
    from sparkcap.publish import marts  # +0.24 s (DuckDB, Arrow)

    for f in marts.fleet_capacities(db, run_id):
        (console or out).print(fleet_line(f), highlight=False)


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
    headers, header_env = parse_header_options(header)  # a message never echoes a value
    req = SweepRequest(
        deployment=Deployment(
            name=deployment or deployment_name(model),
            endpoint=endpoint,
            model=model,
            api_key_env=api_key_env,
            extra_body=parse_extra_body(extra_body),
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
    # the options are checked before the stages they run are imported (a typo fails at once)
    from sparkcap.loadgen.sweep import new_run_id  # +0.07 s (httpx, psutil)
    from sparkcap.night import sweeps  # +0.27 s (the warehouse, the live judge)
    from sparkcap.publish import marts  # +0.24 s (DuckDB, Arrow)
    from sparkcap.transform.dbt_build import build as dbt_build  # +0.20 s (DuckDB)

    path = _db(db)
    # known before the sweep, so that a Ctrl-C can name it
    run_id = (
        new_run_id()
        if run is None
        else sweeps.open_run_for(path, run, req.deployment.name, [req.workload])
    )
    say = out if fmt == "table" else err  # csv/json: only the data on stdout
    try:
        result = sweeps.sweep_watched([req], path, run_id=run_id)
        say.print(f"run id: {result.run_id}", highlight=False)
        dbt_build(path)  # incremental: the new run only; the marts are what the CLI prints
    except KeyboardInterrupt:
        raise _interrupted(path, run_id) from None
    print_levels(path, result.run_id, fmt)
    say.print(f"database: {path}", highlight=False)
    if result.status != "complete":
        err.print(f"error: run {result.run_id} is incomplete: {result.reason}", highlight=False)
        raise typer.Exit(1)
    for c in marts.unmeasured_pairs(path, result.run_id):
        if (c.deployment, c.workload) == (req.deployment.name, req.workload):
            raise CLIError(f"run {result.run_id}: {capacity_words(c, failing=True)}")


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
    from sparkcap.night import sweeps  # +0.27 s (the warehouse, the live judge)

    dep = Deployment(
        name=deployment or deployment_name(model),
        endpoint=endpoint,
        model=model,
        api_key_env=api_key_env,
        extra_body=parse_extra_body(extra_body),
    )
    options = probe_flags(
        name,
        prompt_tokens=prompt_tokens,
        background_streams=background_streams,
        background_tokens=background_tokens,
        probe_interval_s=probe_interval,
        warm_requests=warm_requests,
        concurrency=concurrency,
        lengths=lengths,
        workload=workload,
        code_share=code_share,
        trials=trials,
        max_tokens=max_tokens,
    )
    path = _db(db)
    result = sweeps.run_interruptibly(sweeps.run_probe(dep, options, path))
    out.print(f"run id: {result.run_id}", highlight=False)
    for line in probe_lines(result.waves):
        out.print(line, highlight=False)
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
    from sparkcap.night.sweeps import run_link_check  # +0.27 s (the warehouse)
    from sparkcap.publish import marts  # +0.24 s (DuckDB, Arrow)
    from sparkcap.transform.dbt_build import build as dbt_build  # +0.20 s (DuckDB)

    path = _db(db)
    run_id, _ = run_link_check(load_fleet(fleet), path)
    out.print(f"run id: {run_id}", highlight=False)
    dbt_build(path)  # a link's health is dbt's judgement (int_link_health): printed from it
    links = marts.link_health(path, run_id)
    for k in links:
        out.print(text.link_line(k), highlight=False)
    if not all(k.healthy for k in links):
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
    from sparkcap.publish.compare import compare  # +0.40 s (pandas, DuckDB)

    text.print_frames(out, sys.stdout, compare(_db(db), run_a, run_b), run_a, run_b, fmt)


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="SQL to run read-only")],
    db: Annotated[Path | None, typer.Option(help="DuckDB file")] = None,
    format: Annotated[OutputFormat, typer.Option(help="how rows are printed")] = "table",
) -> None:
    """Run ad-hoc SQL against the warehouse, read-only."""
    from sparkcap.publish import marts  # +0.24 s (DuckDB, Arrow)

    result = marts.query(_db(db), query)
    if result is not None:
        text.print_rows(out, sys.stdout, result, format)


@app.command()
def sim(
    port: Annotated[int, typer.Option(help="port on 127.0.0.1 (0 = any free port)")] = 8000,
) -> None:
    """Serve the simulated twin of the study's fleet (models: qwen, glm, deepseek)."""
    from sparkcap.servers.sim.fleet import twin_profiles  # +0.08 s (asyncio, httpx)
    from sparkcap.servers.sim.server import SimServer

    server = SimServer(twin_profiles(), port=port)
    print(
        json.dumps({"endpoint": server.endpoint, "models": ["qwen", "glm", "deepseek"]}), flush=True
    )
    server.serve_forever()


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
    from sparkcap.loadgen.sweep import new_run_id  # +0.07 s (httpx, psutil)
    from sparkcap.night import plan, steps  # +0.69 s (dbt, Great Expectations, the report)

    searching = search_plan(search, max_level, trials_max, confidence, sustain_factor, trial_tokens)
    search_opts = searching.model_dump() if searching is not None else None
    # validates the fleet file before anything starts
    fl = plan.fleet_for(fleet, profile, search=search_opts)
    spread = fl.distributed.enabled if distributed is None else distributed
    if finish is not None and (searching is not None or distributed is False):
        raise CLIError(
            "--finish takes the night as its children swept it: leave out --embedded and "
            "the search options"
        )
    if spread and no_prefect and finish is None:
        raise CLIError("--distributed runs on Prefect workers: leave out --no-prefect")
    path = _db(db).resolve()
    reports_dir = (reports or get_settings().reports_dir).resolve()
    run_id = finish or new_run_id()
    # the first line, at once: what runs, where it lands, where the report will be
    first_line = (
        f"run id: {run_id} · fleet {fl.name} ({len(fl.deployments)} deployments, "
        f"{'no Prefect' if no_prefect else 'Prefect flow'}"
        f"{', distributed on pool ' + fl.distributed.pool if spread else ''}) · "
        f"database {path} · report {reports_dir / run_id / 'index.html'}"
    )
    try:
        night = steps.run_watched(
            fl,
            fleet,
            path,
            reports_dir,
            first_line,
            run_id=run_id,
            prefect=not no_prefect,
            profile=profile,
            search=search_opts,
            distributed=spread,
            finish=finish is not None,
        )
    except KeyboardInterrupt:
        raise _interrupted(path, run_id) from None
    result = night.result
    if result is None:
        state = night.state
        err.print(
            f"error: nightly flow ended {state.type.value.lower()}: {state.message}",
            highlight=False,
        )
        latest = reports_dir / "latest" / "index.html"
        if latest.exists():
            out.print(f"report: {latest}", highlight=False)
        raise typer.Exit(1)
    say = out if fmt == "table" else err  # csv/json: only the data on stdout
    say.print(f"run id: {result['run_id']}", highlight=False)
    print_levels(path, result["run_id"], fmt)
    print_fleet(path, result["run_id"], say)
    for line in text.night_lines(result, path):
        say.print(line, highlight=False)
    failures = text.night_failures(result)
    for line in failures:
        err.print(line, highlight=False)
    if failures:
        raise typer.Exit(1)


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
    from sparkcap.night.schedule import sync_prefect_yaml  # +0.30 s (the night's plan)

    out.print(sync_prefect_yaml(target, fleets, check=check), highlight=False)


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
    # +0.20 s (DuckDB, Arrow)
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
    from sparkcap.publish.report import render_report  # +0.53 s (pandas, Altair)

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
    from sparkcap.store.lake import Lake, stage_lake  # +0.24 s (DuckDB, Arrow, fsspec)
    from sparkcap.store.spool import stage_spool

    if (lake is None) != (run is None):
        raise CLIError("--lake and --run go together")
    n = stage_spool(_db(db))
    out.print(f"staged {n} spooled wave(s)", highlight=False)
    if lake is not None and run is not None:
        staged = stage_lake(_db(db), Lake(lake), run)
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
    from sparkcap.dq.validate import DQConfig, run_validation  # +0.42 s (Great Expectations)

    cfg = DQConfig(prose_length_tolerance=prose_tolerance, max_failure_rate=max_failure_rate)
    result = run_validation(_db(db), run, config=cfg, docs_dir=out_dir)
    for line in text.validation_lines(result):
        out.print(line, highlight=False)
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
    from sparkcap.night.sweeps import serve_until_stopped  # +0.27 s (the warehouse)
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
    serve_until_stopped(server)


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
    except SparkcapError as exc:  # every error sparkcap words for a person (sparkcap/errors.py)
        err.print(f"error: {exc}", highlight=False, soft_wrap=True)
        raise SystemExit(1) from None
    except (LookupError, FileNotFoundError) as exc:
        # still raised as built-ins for a person by store.warehouse.connect (no warehouse),
        # dq.validate (no run to validate), loadgen.connections (no CA bundle), resources and
        # night.sweeps.open_run_for: worded here until they raise errors.NotFound / MissingFile
        err.print(f"error: {exc}", highlight=False, soft_wrap=True)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        err.print("error: interrupted", highlight=False)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
