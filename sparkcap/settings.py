"""The one place sparkcap reads its environment.

Everything else takes explicit arguments; keeping environment reads in one ``pydantic-settings``
class makes it possible to say exactly which variables change behaviour
(docs/reference/environment.md lists them), to reject a bad value with one clear line, and to
test that secrets are only ever read by name, on demand (``read_secret``), never swept into a
settings object that could be logged.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr, StrictFloat, StrictInt, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from sparkcap.errors import BadEnvironment

DEFAULT_DB = Path("warehouse") / "sparkcap.duckdb"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        frozen=True, extra="ignore", env_ignore_empty=True, populate_by_name=True
    )

    db_path: Path = Field(DEFAULT_DB, validation_alias="SPARKCAP_DB")
    work_dir: Path = Field(Path(".sparkcap"), validation_alias="SPARKCAP_HOME")
    cache_dir: Path = Field(
        default_factory=lambda: Path.home() / ".cache" / "sparkcap",
        validation_alias="SPARKCAP_CACHE",
    )
    # compiled llama-server binaries, keyed by everything the compile depends on
    # (servers/llama.build_key): kept apart from SPARKCAP_CACHE, which CI empties on every run
    # to prove the download, digest and configure steps, so only a new key (or a new machine)
    # pays the ~4.5 min compile
    build_cache_dir: Path = Field(
        default_factory=lambda: Path.home() / ".cache" / "sparkcap-build",
        validation_alias="SPARKCAP_BUILD_CACHE",
    )
    reports_dir: Path = Field(Path("reports"), validation_alias="SPARKCAP_REPORTS")
    log_level: str = Field("WARNING", validation_alias="SPARKCAP_LOG_LEVEL")
    # how long a writer waits for another process's DuckDB lock before saying so
    busy_wait_s: float = Field(
        10.0, ge=0, validation_alias=AliasChoices("SPARKCAP_BUSY_WAIT_S", "busy_wait_s")
    )

    # dbt var overrides for every judgement this environment makes (a JSON object, e.g.
    # '{"timing_error_tolerance": 0.02}'): dbt builds, the live search judge and the capture's
    # decision to re-measure a client-spoiled wave all read them (build.judgement_vars), so
    # one setting moves the rule everywhere; `sparkcap build --var` still wins for one build
    # where each dbt invocation and GX validation adds one JSON line (kind, what, seconds):
    # the suite counts its builds with it, and a slow night shows where its minutes went
    build_log: Path | None = Field(None, validation_alias="SPARKCAP_BUILD_LOG")

    # strict: JSON's true is not the number 1 (a 1 tok/s threshold, silently)
    dbt_vars: dict[str, StrictInt | StrictFloat | list[StrictInt | StrictFloat]] = Field(
        default_factory=dict, validation_alias="SPARKCAP_DBT_VARS"
    )

    # which client host a distributed worker runs on: names its stream budget (a Prefect
    # global concurrency limit) and the host a lost child is reported against
    client_host: str = Field(
        default_factory=socket.gethostname, min_length=1, validation_alias="SPARKCAP_CLIENT_HOST"
    )

    @field_validator("dbt_vars", mode="before")
    @classmethod
    def _numbers_only(cls, value: object) -> object:
        """Said per var, before the union's three lines of type errors."""
        if isinstance(value, dict):
            for name, given in value.items():
                items = given if isinstance(given, list) else [given]
                if not items or any(
                    isinstance(x, bool) or not isinstance(x, int | float) for x in items
                ):
                    shown = json.dumps(given)[:60]
                    raise ValueError(f"{name}: {shown} is not a number or a list of numbers")
        return value

    @field_validator("log_level")
    @classmethod
    def _upper(cls, value: str) -> str:
        return value.upper()


def get_settings() -> Settings:
    try:
        return Settings()
    except SettingsError as exc:
        raise BadEnvironment(str(exc)) from None


def note_build(kind: str, what: str, seconds: float, cpu_s: float | None = None) -> None:
    """One line in ``SPARKCAP_BUILD_LOG`` (unset: nothing); appended whole, so the parallel
    processes of a test run or a night share one file. A log that cannot be written costs
    the note, never the build. ``cpu_s``: the process's CPU seconds over the same span (on a
    loaded machine the wall seconds say how long it waited, not what it cost)."""
    path = get_settings().build_log
    if path is None:
        return
    note: dict[str, object] = {"kind": kind, "what": what, "seconds": round(seconds, 3)}
    if cpu_s is not None:
        note["cpu_s"] = round(cpu_s, 3)
    # under pytest (subprocesses inherit it): which test paid for the build, so the suite's
    # summary names the tests that build most rather than leaving the count anonymous
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    if test:
        note["test"] = test
    line = json.dumps(note) + "\n"
    try:
        with path.open("a", encoding="utf-8") as f:
            f.write(line)
    except OSError:
        pass


EPHEMERAL_STARTUP_TIMEOUT_S = 180


def prepare_prefect_env() -> None:
    """Keep Prefect's state in the project's working area and its telemetry off."""
    work = get_settings().work_dir
    os.environ.setdefault("PREFECT_HOME", str((work / "prefect").resolve()))
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # the flow's progress lines reach its run logs at INFO; the terminal shows sparkcap's own
    # progress instead of Prefect's INFO chatter, so Prefect's console handler keeps warnings
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO")
    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    # the ephemeral API's server must answer within the startup timeout, and a first run from
    # a new venv (no bytecode yet) on a loaded machine takes longer than Prefect's 20 s
    # default: a night must not fail before it begins for it
    os.environ.setdefault(
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", str(EPHEMERAL_STARTUP_TIMEOUT_S)
    )
    # Prefect creates its home but not the folders above it: they are made here
    Path(os.environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)


def read_secret(env_var: str | None) -> SecretStr | None:
    """Read an API key from the variable a config names; ``None`` when unset or empty."""
    if not env_var:
        return None
    value = os.environ.get(env_var)
    return SecretStr(value) if value else None
