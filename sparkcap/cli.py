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
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError

from sparkcap import cli_options as opt
from sparkcap import cli_replay
from sparkcap.config import command_line
from sparkcap.config.deployment import Deployment, deployment_name
from sparkcap.config.fleet import load_fleet
from sparkcap.config.plan import SearchPlan, SweepPlan, SweepRequest
from sparkcap.errors import CLIError, Interrupted, SparkcapError
from sparkcap.night.progress import probe_lines
from sparkcap.publish import terminal
from sparkcap.publish.night import read_night
from sparkcap.publish.text.capacity import capacity_words, search_disagreement_words
from sparkcap.publish.text.changes import regression_line
from sparkcap.publish.text.console import text_console
from sparkcap.publish.text.links import link_line
from sparkcap.publish.text.night import (
    interrupted_line,
    night_failures,
    night_lines,
    validation_lines,
)
from sparkcap.publish.text.tables import print_frames, print_rows
from sparkcap.resources import bundled_fleet
from sparkcap.settings import get_settings

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Measure how many concurrent streams an LLM fleet sustains at an interactive rate.",
)
err = text_console(stderr=True, soft_wrap=True)
app.command("replay")(cli_replay.replay)  # its parsing lives in cli_replay.py


@app.callback()
def _root(version: opt.VersionOption = False) -> None:
    """Measure how many concurrent streams an LLM fleet sustains at an interactive rate."""
    get_settings()  # the environment, said wrong first, before any of the command's options


out = text_console(width=None if sys.stdout.isatty() else 120, soft_wrap=not sys.stdout.isatty())


def _db(db: Path | None) -> Path:
    return db if db is not None else get_settings().db_path


def _interrupted(db: Path, run_id: str) -> Interrupted:
    from sparkcap.publish import marts  # +0.24 s (DuckDB, Arrow)

    return Interrupted(interrupted_line(run_id, marts.recorded_run(db, run_id)))


@app.command()
@opt.search_options
def sweep(
    endpoint: opt.SweepEndpointOption,
    model: opt.ModelOption,
    workload: opt.SweepWorkloadOption,
    deployment: opt.DeploymentOption = None,
    levels: opt.LevelsOption = "1,2,4,8,16",
    trials: opt.SweepTrialsOption = 3,
    no_warmup: opt.NoWarmupOption = False,
    max_tokens: opt.SweepMaxTokensOption = None,
    sessions: opt.SessionsOption = None,
    max_remeasures: opt.MaxRemeasuresOption = 2,
    client_processes: opt.ClientProcessesOption = None,
    api_key_env: opt.ApiKeyEnvOption = "OPENAI_API_KEY",
    extra_body: opt.ExtraBodyOption = None,
    header: opt.HeaderOption = None,
    ca_bundle: opt.CaBundleOption = None,
    continuous_usage: opt.ContinuousUsageOption = False,
    db: opt.DbOption = None,
    fmt: opt.LevelsFormatOption = "table",
    run: opt.JoinRunOption = None,
    searching: SearchPlan | None = None,
) -> None:
    """Sweep one deployment with synchronized waves and record every token timestamp."""
    # a message never echoes a value
    headers, header_env = command_line.parse_header_options(header)
    req = SweepRequest(
        deployment=Deployment(
            name=deployment or deployment_name(model),
            endpoint=endpoint,
            model=model,
            api_key_env=api_key_env,
            extra_body=command_line.parse_extra_body(extra_body),
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
            sessions=command_line.parse_session_shape(sessions, workload),
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
    terminal.print_levels(out, sys.stdout, read_night(path, result.run_id), fmt)
    for d in marts.search_disagreements(path, result.run_id):
        err.print(search_disagreement_words(d), highlight=False)
    say.print(f"database: {path}", highlight=False)
    if result.status != "complete":
        err.print(f"error: run {result.run_id} is incomplete: {result.reason}", highlight=False)
        raise typer.Exit(1)
    for c in marts.unmeasured_pairs(path, result.run_id):
        if (c.deployment, c.workload) == (req.deployment.name, req.workload):
            raise CLIError(f"run {result.run_id}: {capacity_words(c, failing=True)}")


@app.command()
def probe(
    name: opt.ProbeNameArgument,
    endpoint: opt.ProbeEndpointOption,
    model: opt.ModelOption,
    deployment: opt.DeploymentOption = None,
    prompt_tokens: opt.PromptTokensOption = 4000,
    background_streams: opt.BackgroundStreamsOption = None,
    background_tokens: opt.BackgroundTokensOption = None,
    probe_interval: opt.ProbeIntervalOption = 0.5,
    warm_requests: opt.WarmRequestsOption = 3,
    concurrency: opt.ConcurrencyOption = 8,
    lengths: opt.LengthsOption = "400,1000",
    workload: opt.ProbeWorkloadOption = "prose",
    code_share: opt.CodeShareOption = 0.5,
    trials: opt.ProbeTrialsOption = 2,
    max_tokens: opt.ProbeMaxTokensOption = None,
    start_tokens: opt.StartTokensOption = 1024,
    context_tokens: opt.ContextTokensOption = None,
    api_key_env: opt.ApiKeyEnvOption = "OPENAI_API_KEY",
    extra_body: opt.ExtraBodyOption = None,
    db: opt.DbOption = None,
) -> None:
    """Measure what long prefills and prompt caches do to responsiveness."""
    from sparkcap.night import sweeps  # +0.27 s (the warehouse, the live judge)

    dep = Deployment(
        name=deployment or deployment_name(model),
        endpoint=endpoint,
        model=model,
        api_key_env=api_key_env,
        extra_body=command_line.parse_extra_body(extra_body),
    )
    options = command_line.probe_flags(
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
        start_tokens=start_tokens,
        context_tokens=context_tokens,
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
def link_check(fleet: opt.LinksFleetOption, db: opt.DbOption = None) -> None:
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
        out.print(link_line(k), highlight=False)
    if not all(k.healthy for k in links):
        raise typer.Exit(1)


@app.command("compare")
def compare_cmd(
    run_a: opt.RunAArgument,
    run_b: opt.RunBArgument,
    db: opt.DbOption = None,
    fmt: opt.CompareFormatOption = "table",
    fail_on: opt.FailOnOption = None,
) -> None:
    """Before/after: change in median rate, aggregate throughput, prefill, capacity, links."""
    from sparkcap.publish.compare import compare, regressions  # +0.40 s (pandas, DuckDB)

    # the gate's own checks (both runs built, something to compare) come before any table
    found = regressions(_db(db), run_a, run_b) if fail_on == "regression" else []
    print_frames(out, sys.stdout, compare(_db(db), run_a, run_b), run_a, run_b, fmt)
    if fail_on == "regression":
        for r in found:
            err.print(regression_line(r), highlight=False)
        if found:
            err.print(
                f"error: run {run_b} regressed against {run_a}: {len(found)} regression(s)",
                highlight=False,
            )
            raise typer.Exit(opt.REGRESSION_EXIT_CODE)


@app.command("export")
def export_cmd(
    prometheus: opt.PrometheusFileOption,
    run: opt.ExportRunOption = None,
    db: opt.DbOption = None,
) -> None:
    """Write a run's capacities, tiers, changes and energy as a node-exporter textfile."""
    from sparkcap.publish.export import export_prometheus  # +0.24 s (DuckDB, Arrow)

    night = export_prometheus(_db(db), prometheus, run)
    flagged = sum(1 for ch in night.changes if ch.is_change)
    out.print(
        f"wrote {prometheus}: run {night.run.run_id}, {len(night.capacities)} capacities, "
        f"{len(night.tiers)} tiers, {len(night.changes)} comparisons ({flagged} flagged), "
        f"{len(night.energy)} energy figures",
        highlight=False,
    )


@app.command()
def plan(
    mix: opt.MixOption = None,
    long_prompts: opt.LongPromptsOption = None,
    max_below_share: opt.MaxBelowShareOption = None,
    think: opt.ThinkOption = None,
    run: opt.ExportRunOption = None,
    db: opt.DbOption = None,
) -> None:
    """Requests a minute per deployment by open-loop capacity, beside the burst plan (dbt)."""
    from sparkcap.transform.plan_vars import build_plan, plan_vars

    build_plan(_db(db), plan_vars(mix, long_prompts, max_below_share, think))
    night = read_night(_db(db), run)
    if not terminal.print_plan(out, night):
        raise typer.BadParameter(f"no capacities of run {night.run_id} to plan", param_hint="--run")


@app.command()
def sql(
    query: opt.QueryArgument, db: opt.DbOption = None, format: opt.RowsFormatOption = "table"
) -> None:
    """Run ad-hoc SQL against the warehouse, read-only."""
    from sparkcap.publish import marts  # +0.24 s (DuckDB, Arrow)

    result = marts.query(_db(db), query)
    if result is not None:
        print_rows(out, sys.stdout, result, format)


@app.command()
def sim(port: opt.PortOption = 8000) -> None:
    """Serve the simulated twin of the study's fleet (models: qwen, glm, deepseek)."""
    from sparkcap.servers.sim.fleet import twin_profiles  # +0.08 s (asyncio, httpx)
    from sparkcap.servers.sim.server import SimServer

    server = SimServer(twin_profiles(), port=port)
    print(
        json.dumps({"endpoint": server.endpoint, "models": ["qwen", "glm", "deepseek"]}), flush=True
    )
    server.serve_forever()


@app.command()
@opt.search_options
def run(
    fleet: opt.NightFleetOption,
    db: opt.DbOption = None,
    profile: opt.ProfileOption = "full",
    reports: opt.ReportsOption = None,
    no_prefect: opt.NoPrefectOption = False,
    fmt: opt.LevelsFormatOption = "table",
    searching: SearchPlan | None = None,
    distributed: opt.DistributedOption = None,
    finish: opt.FinishOption = None,
) -> None:
    """Run the nightly pipeline once: sweep, stage, validate, build, report."""
    from sparkcap.loadgen.sweep import new_run_id  # +0.07 s (httpx, psutil)
    from sparkcap.night import plan, steps  # +0.69 s (dbt, Great Expectations, the report)

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
    built = read_night(path, result["run_id"])
    terminal.print_levels(out, sys.stdout, built, fmt)
    terminal.print_fleet(say, built)
    for line in night_lines(result, path):
        say.print(line, highlight=False)
    failures = night_failures(result)
    for line in failures:
        err.print(line, highlight=False)
    if failures:
        raise typer.Exit(1)


@app.command("prefect-yaml")
def prefect_yaml_cmd(
    fleets: opt.FleetsArgument = None,
    target: opt.PrefectYamlOutOption = Path("prefect.yaml"),
    check: opt.CheckOption = False,
) -> None:
    """Write prefect.yaml's deployments from the fleet files' schedules (the one source)."""
    from sparkcap.night.schedule import sync_prefect_yaml  # +0.30 s (the night's plan)

    out.print(sync_prefect_yaml(target, fleets, check=check), highlight=False)


@app.command()
def build(
    db: opt.DbOption = None,
    full_refresh: opt.FullRefreshOption = False,
    threshold: opt.ThresholdOption = None,
    var: opt.VarOption = None,
    unit_tests: opt.UnitTestsOption = False,
) -> None:
    """Run dbt: stream rates, trial medians, levels, capacities and fleet capacity."""
    # +0.20 s (DuckDB, Arrow)
    from sparkcap.transform.dbt_build import build as dbt_build
    from sparkcap.transform.dbt_build import parse_var_overrides

    dbt_vars: dict[str, Any] = parse_var_overrides(var or [])
    if threshold is not None:  # checked as --var is: finite, above 0, within its range
        dbt_vars.update(parse_var_overrides([f"threshold_tok_s={threshold!r}"], "--threshold"))
    result = dbt_build(
        _db(db), full_refresh=full_refresh, dbt_vars=dbt_vars or None, unit_tests=unit_tests
    )
    out.print(f"dbt build ok: {result.n_nodes} models and tests", highlight=False)


@app.command()
def report(
    db: opt.DbOption = None,
    run: opt.ReportRunsOption = None,
    night: opt.NightDateOption = None,
    out_dir: opt.OutDirReportOption = None,
) -> None:
    """Render the HTML report (and PNG/SVG charts) of a run, several runs or a night."""
    from sparkcap.publish.report import render_report  # +0.53 s (pandas, Altair)

    night_date = opt.night_date(night, bool(run))
    result = render_report(_db(db), run or None, out_dir, night=night_date)
    out.print(f"report: {result.index.resolve()}", highlight=False)
    if result.latest is not None:
        out.print(f"latest: {result.latest.resolve()}", highlight=False)


@app.command()
def stage(
    db: opt.DbOption = None, lake: opt.LakeOption = None, run: opt.LakeRunOption = None
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
    db: opt.DbOption = None,
    run: opt.ValidateRunOption = None,
    out_dir: opt.DqOutDirOption = None,
    prose_tolerance: opt.ProseToleranceOption = 0.05,
    max_failure_rate: opt.MaxFailureRateOption = 0.1,
) -> None:
    """Run the data-quality suites on a run; exit 1 if a blocking expectation fails."""
    from sparkcap.dq.validate import DQConfig, run_validation  # +0.42 s (Great Expectations)

    cfg = DQConfig(prose_length_tolerance=prose_tolerance, max_failure_rate=max_failure_rate)
    result = run_validation(_db(db), run, config=cfg, docs_dir=out_dir)
    for line in validation_lines(result):
        out.print(line, highlight=False)
    if not result.success:
        names = ", ".join(sorted({o.expectation for o in result.blocking_failures}))
        err.print(
            f"error: blocking expectations failed for run {result.run_id}: {names}", highlight=False
        )
        raise typer.Exit(1)


@app.command()
def demo(
    db: opt.DbOption = None, fleet: opt.DemoFleetOption = None, reports: opt.ReportsOption = None
) -> None:
    """The nightly flow on the simulated twin fleet with the demo profile; prints the report."""
    fleet = fleet or bundled_fleet("twin")
    run(fleet=fleet, db=db, profile="demo", reports=reports, no_prefect=False, fmt="table")


@app.command()
def calibrate(
    max_streams: opt.MaxStreamsOption = 1024, trials: opt.CalibrateTrialsOption = 1
) -> None:
    """Measure this client host's stream budget: waves of growing size against a pinned
    simulator, judged by dbt's client-timing tolerances; a search on this host is capped at
    the largest clean size (about 15 s on 2 cores)."""
    # +0.27 s (the capture path, the simulator, the dbt vars)
    from sparkcap.night.calibrate import budget_lines, budget_path
    from sparkcap.night.calibrate import calibrate as self_test

    budget = self_test(max_streams=max_streams, trials=trials)
    for line in budget_lines(budget, budget_path()):
        out.print(line, highlight=False)


@app.command("local-server")
def local_server_cmd(
    port: opt.PortOption = 8080,
    slots: opt.SlotsOption = 4,
    context: opt.ContextOption = 8192,
    threads: opt.ThreadsOption = None,
    spec_type: opt.SpecTypeOption = None,
    build_only: opt.BuildOnlyOption = False,
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
        err.print(f"error: {opt.usage_line(exc)}", highlight=False, soft_wrap=True)
        raise SystemExit(getattr(exc, "exit_code", 2)) from None
    except ValidationError as exc:
        err.print(f"error: {opt.validation_line(exc)}", highlight=False, soft_wrap=True)
        raise SystemExit(2) from None
    except Interrupted as exc:
        err.print(f"error: {exc}", highlight=False, soft_wrap=True)
        raise SystemExit(130) from None
    except SparkcapError as exc:  # every error sparkcap words for a person (sparkcap/errors.py)
        err.print(f"error: {exc}", highlight=False, soft_wrap=True)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        err.print("error: interrupted", highlight=False)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
