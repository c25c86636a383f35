"""The ``sparkcap`` command line's options, declared once each as ``Annotated`` types.

Several commands take the same option (``--db``, ``--model``, the search flags), and one
declaration keeps their help text from drifting apart; the long single-command ones live here
too, so that ``cli.py`` reads as what each command does. A type carries the option's help and
flags only: its default stays in the command's signature, where typer reads it, and its name is
the parameter's (typer derives ``--max-level`` from ``max_level``), so an alias must be used
under the parameter name it was written for. ``docs/reference/cli.md`` is generated from the
app these build (``python -m sparkcap.docs_reference --check``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from pydantic import ValidationError

from sparkcap import __version__
from sparkcap.config.base import Profile, StreamWorkloadName, WorkloadName
from sparkcap.config.command_line import search_plan
from sparkcap.config.probes import ProbeName
from sparkcap.publish.text.tables import OutputFormat


def usage_line(exc: typer.TyperException) -> str:
    """A usage error as one line that names the option, in typer's words less its noise."""
    msg = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    msg = msg.replace(": Value error, ", ": ")  # typer's wording for a Literal choice
    param = getattr(exc, "param", None)
    opts = getattr(param, "opts", None) or [getattr(param, "name", "")]
    hint = getattr(exc, "param_hint", None) or opts[0]
    prefix = f"invalid {hint}: " if hint and isinstance(hint, str) and hint not in msg else ""
    return f"{prefix}{msg}"


def validation_line(exc: ValidationError) -> str:
    """The first of pydantic's errors about what the options built, and how many more."""
    e = exc.errors()[0]
    loc = ".".join(str(x) for x in e["loc"]) or "input"
    more = f" (+{len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    msg = str(e["msg"]).removeprefix("Value error, ")  # pydantic's prefix on our own words
    return f"invalid {loc}: {msg}{more}"


def print_version(value: bool) -> None:
    if value:
        print(f"sparkcap {__version__}")
        raise typer.Exit()


VersionOption = Annotated[
    bool,
    typer.Option(
        "--version", callback=print_version, is_eager=True, help="print the version and exit"
    ),
]

# shared by several commands
DbOption = Annotated[Path | None, typer.Option(help="DuckDB file")]
ModelOption = Annotated[str, typer.Option(help="model name the server serves")]
DeploymentOption = Annotated[str | None, typer.Option(help="deployment name (default: model)")]
ApiKeyEnvOption = Annotated[str, typer.Option(help="variable holding the API key")]
ExtraBodyOption = Annotated[str | None, typer.Option(help="JSON merged into each request")]
LevelsFormatOption = Annotated[
    OutputFormat, typer.Option("--format", help="levels as a table, csv or json (stdout)")
]
ReportsOption = Annotated[Path | None, typer.Option(help="report folder")]
OutDirReportOption = Annotated[Path | None, typer.Option("--out", help="report folder")]
PortOption = Annotated[int, typer.Option(help="port on 127.0.0.1 (0 = any free port)")]

# the search (sweep, run)
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
# the search options as (parameter name, type, default), in the order --help lists them
_SEARCH_OPTIONS: tuple[tuple[str, Any, object], ...] = (
    ("search", SearchFlag, False),
    ("max_level", MaxLevel, None),
    ("trials_max", TrialsMax, None),
    ("confidence", Confidence, None),
    ("sustain_factor", SustainFactor, None),
    ("trial_tokens", TrialTokens, None),
)


def search_options(command: Callable[..., None]) -> Callable[..., None]:
    """A command that searches (sweep, run) takes the search options, declared here once, in
    place of its parameter ``searching``: typer lists the six options where that parameter
    stands, and the command receives them as one plan (``None``: a grid), an option given
    without ``--search`` refused (``command_line.search_plan``)."""
    signature = inspect.signature(command, eval_str=True)
    params = list(signature.parameters.values())
    at = [p.name for p in params].index("searching")
    searched = [
        inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=d, annotation=t)
        for name, t, d in _SEARCH_OPTIONS
    ]
    listed = [*params[:at], *searched, *params[at + 1 :]]

    @functools.wraps(command)
    def with_search_options(*args: Any, **kwargs: Any) -> None:
        given: dict[str, Any] = {name: kwargs.pop(name, d) for name, _, d in _SEARCH_OPTIONS}
        command(*args, searching=search_plan(**given), **kwargs)

    # typer reads a command's options from its signature and type hints: these, not the wrapped
    with_search_options.__signature__ = signature.replace(parameters=listed)  # type: ignore[attr-defined]
    with_search_options.__annotations__ = {p.name: p.annotation for p in listed} | {"return": None}
    return with_search_options


# sweep
SweepEndpointOption = Annotated[
    str, typer.Option(help="OpenAI-compatible base URL, e.g. http://h:8000/v1")
]
MaxRemeasuresOption = Annotated[
    int, typer.Option(help="extra attempts for a wave the client's own timing spoiled (0..5)")
]
ClientProcessesOption = Annotated[
    int | None,
    typer.Option(
        help="load-generating processes per wave (default: one per core; 1 runs every "
        "stream in this process)",
        min=1,
        max=256,
    ),
]
HeaderOption = Annotated[
    list[str] | None,
    typer.Option(
        help="extra request header NAME:VALUE, or NAME:env:VAR to read the value from VAR "
        "(repeatable; values are secrets: never stored, only names)"
    ),
]
ContinuousUsageOption = Annotated[
    bool, typer.Option(help="ask for per-chunk usage (vLLM continuous_usage_stats)")
]
SweepWorkloadOption = Annotated[WorkloadName, typer.Option(help="which prompts")]
LevelsOption = Annotated[str, typer.Option(help="concurrency levels")]
SweepTrialsOption = Annotated[int, typer.Option(help="counted trials per level (1..5)")]
NoWarmupOption = Annotated[bool, typer.Option("--no-warmup", help="skip warm-up waves")]
SweepMaxTokensOption = Annotated[int | None, typer.Option(help="override the required length")]
SessionsOption = Annotated[
    str | None,
    typer.Option(
        help="agent sessions' shape as NAME=VALUE pairs, e.g. turns=3,answer_tokens=48,think_s=0.5 "
        "(the fleet file's sessions: fields; --workload agent only)"
    ),
]
CaBundleOption = Annotated[Path | None, typer.Option(help="CA bundle for TLS verification")]
JoinRunOption = Annotated[
    str | None,
    typer.Option(help="add this sweep to run ID (or 'latest') instead of starting a new one"),
]

# probe
ProbeNameArgument = Annotated[ProbeName, typer.Argument(help="which probe")]
ProbeEndpointOption = Annotated[str, typer.Option(help="OpenAI-compatible base URL")]
PromptTokensOption = Annotated[int, typer.Option(help="long prompt / document length in tokens")]
BackgroundStreamsOption = Annotated[
    int | None, typer.Option(help="decode streams held (default: 4; context-ladder 2)")
]
BackgroundTokensOption = Annotated[
    int | None, typer.Option(help="their output length (default: 400; context-ladder 128)")
]
ProbeIntervalOption = Annotated[float, typer.Option(help="seconds between probe requests")]
WarmRequestsOption = Annotated[int, typer.Option(help="warm repeats (prompt-cache)")]
ConcurrencyOption = Annotated[int, typer.Option(help="streams (output-length, mixed)")]
LengthsOption = Annotated[str, typer.Option(help="output lengths (output-length)")]
ProbeWorkloadOption = Annotated[StreamWorkloadName, typer.Option(help="prompts (output-length)")]
CodeShareOption = Annotated[float, typer.Option(help="share of code streams (mixed)")]
ProbeTrialsOption = Annotated[int, typer.Option(help="counted waves (output-length, mixed)")]
ProbeMaxTokensOption = Annotated[
    int | None, typer.Option(help="output length (mixed; context-ladder: the answer)")
]
StartTokensOption = Annotated[int, typer.Option(help="first rung's prompt (context-ladder)")]
ContextTokensOption = Annotated[
    int | None, typer.Option(help="declared context (context-ladder; default: the server's)")
]

# link-check, compare, sql
LinksFleetOption = Annotated[Path, typer.Option(help="fleet file with deployments' links")]
RunAArgument = Annotated[str, typer.Argument(help="the earlier run")]
RunBArgument = Annotated[str, typer.Argument(help="the later run")]
CompareFormatOption = Annotated[
    OutputFormat, typer.Option("--format", help="tables, csv (one block each) or json")
]
# a gate's own exit status, apart from usage errors (2) and failures (1)
REGRESSION_EXIT_CODE = 3
# a replayed plan that does not hold (fails, not replayed, no verdict): a gate too, for scripts
PLAN_NOT_HOLDING_EXIT_CODE = 3
FailOnOption = Annotated[
    Literal["regression"] | None,
    typer.Option(
        "--fail-on",
        help="exit 3 when the later run regressed: a capacity wholly below the earlier run's "
        "(each with its interval), a pair the earlier run measured and it did not, or a change "
        "marts.fct_changes flags slower or lower than its baseline (listed on stderr)",
    ),
]
QueryArgument = Annotated[str, typer.Argument(help="SQL to run read-only")]
RowsFormatOption = Annotated[OutputFormat, typer.Option(help="how rows are printed")]

# export
PrometheusFileOption = Annotated[
    Path,
    typer.Option(
        "--prometheus",
        help="textfile to write (node-exporter's textfile collector format, e.g. "
        "/var/lib/node_exporter/sparkcap.prom), replaced whole",
    ),
]
ExportRunOption = Annotated[str | None, typer.Option(help="run id (default: the latest built run)")]

# plan
MixOption = Annotated[
    str | None,
    typer.Option(
        help="the requests' mix, shares adding to 1, e.g. code=0.7,prose=0.3 (default: the dbt "
        "var plan_code_share, 0.7)"
    ),
]
LongPromptsOption = Annotated[
    str | None,
    typer.Option(
        help="long prompts the fleet takes beside the streams: RATE/min@TOKENS or 0 (default: "
        "the dbt vars plan_long_prompts_per_min and plan_long_prompt_tokens, 2/min@32k)"
    ),
]
MaxBelowShareOption = Annotated[
    float | None,
    typer.Option(
        help="share of time a deployment's decode may be below the threshold (default: the dbt "
        "var plan_max_below_threshold_share, 0.05)"
    ),
]
ThinkOption = Annotated[
    float | None,
    typer.Option(
        help="seconds a user thinks between requests, for the users figure (default: the "
        "dbt var think_time_s, 30)",
        min=0.0,
        max=86_400.0,
    ),
]

# run
NightFleetOption = Annotated[Path, typer.Option(help="fleet file (YAML)")]
ProfileOption = Annotated[Profile, typer.Option(help="how much of the fleet file's plan to run")]
NoPrefectOption = Annotated[
    bool, typer.Option("--no-prefect", help="run the same steps without Prefect")
]
DistributedOption = Annotated[
    bool | None,
    typer.Option(
        "--distributed/--embedded",
        help="sweep on the fleet's Prefect work pool, one child flow run per deployment x "
        "workload, landing in the lake (default: the fleet file's distributed.enabled)",
    ),
]
FinishOption = Annotated[
    str | None,
    typer.Option(
        help="finish the distributed night RUN_ID whose parent stopped: stage what its "
        "children landed in the lake, name what is missing, validate, build, report",
        metavar="RUN_ID",
    ),
]

# prefect-yaml
FleetsArgument = Annotated[
    list[Path] | None, typer.Argument(help="fleet files (default: fleets/*.yaml)")
]
PrefectYamlOutOption = Annotated[Path, typer.Option("--out", help="file to write")]
CheckOption = Annotated[
    bool, typer.Option("--check", help="only say whether the file is up to date (exit 1)")
]

# build
FullRefreshOption = Annotated[bool, typer.Option(help="rebuild every night from scratch")]
ThresholdOption = Annotated[
    float | None,
    typer.Option(help="tok/s threshold (default: dbt's var threshold_tok_s, 20 unless set)"),
]
VarOption = Annotated[
    list[str] | None,
    typer.Option(
        "--var",
        help="override a dbt var, NAME=NUMBER (repeatable; e.g. probe_window_s=2, "
        "dip_share=0.3, bootstrap_samples=500); a list var NAME=10/20/30 "
        "(tier_thresholds_tok_s, tier_ttft_p90_ceilings_s)",
    ),
]
UnitTestsOption = Annotated[
    bool, typer.Option(help="also run dbt's unit tests of the formulas (left out nightly)")
]

# report
ReportRunsOption = Annotated[
    list[str] | None,
    typer.Option(
        help="run id (default: the latest built run); repeat it to report several runs "
        "as one (each deployment x workload from the newest run that measured it)"
    ),
]
NightDateOption = Annotated[
    str | None,
    typer.Option(help="report every built run that started on this UTC date (YYYY-MM-DD)"),
]


def night_date(night: str | None, runs_given: bool) -> date | None:
    """``report --night``'s date; a night and named runs together are a usage error."""
    if night is None:
        return None
    if runs_given:
        raise typer.BadParameter("give --run or --night, not both", param_hint="--night")
    try:
        return date.fromisoformat(night)
    except ValueError:
        raise typer.BadParameter(
            f"expected a date YYYY-MM-DD, got {night!r}", param_hint="--night"
        ) from None


# stage
LakeOption = Annotated[
    str | None,
    typer.Option(help="a distributed night's lake (path or fsspec URL): stage its run"),
]
LakeRunOption = Annotated[str | None, typer.Option(help="the run to stage from --lake")]

# validate
ValidateRunOption = Annotated[
    str | None, typer.Option(help="run id (default: the newest run with sweep waves)")
]
DqOutDirOption = Annotated[
    Path | None, typer.Option("--out", help="folder for the data-quality pages")
]
ProseToleranceOption = Annotated[
    float, typer.Option(help="prose may be this share shorter than requested")
]
MaxFailureRateOption = Annotated[
    float, typer.Option(help="ceiling on failed streams per counted trial")
]

# demo
DemoFleetOption = Annotated[
    Path | None, typer.Option(help="fleet file (default: the twin fleet shipped with sparkcap)")
]

# calibrate
MaxStreamsOption = Annotated[
    int,
    typer.Option(
        help="largest wave tried (sizes double from 16 up to it; the first spoiled size ends "
        "the test)",
        min=1,
        max=4096,
    ),
]
CalibrateTrialsOption = Annotated[
    int, typer.Option(help="counted waves per size, each to be clean (1..5)", min=1, max=5)
]

# local-server
SlotsOption = Annotated[int, typer.Option(help="parallel slots (-np)")]
ContextOption = Annotated[int, typer.Option(help="total context (-c), shared by the slots")]
ThreadsOption = Annotated[int | None, typer.Option(help="CPU threads")]
SpecTypeOption = Annotated[str | None, typer.Option(help="e.g. ngram-simple")]
BuildOnlyOption = Annotated[bool, typer.Option(help="build and fetch the model, then exit")]
