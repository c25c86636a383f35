"""The one place sparkcap reads its environment.

Everything else takes explicit arguments; keeping environment reads here makes it possible to
say exactly which variables change behaviour (the README lists them) and to test that secrets
are only ever read by name, on demand.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

DEFAULT_DB = Path("warehouse") / "sparkcap.duckdb"


@dataclass(frozen=True, slots=True)
class Settings:
    db_path: Path
    work_dir: Path
    cache_dir: Path
    reports_dir: Path
    log_level: str


def get_settings() -> Settings:
    work = Path(os.environ.get("SPARKCAP_HOME", ".sparkcap"))
    cache = os.environ.get("SPARKCAP_CACHE") or str(Path.home() / ".cache" / "sparkcap")
    return Settings(
        db_path=Path(os.environ.get("SPARKCAP_DB", str(DEFAULT_DB))),
        work_dir=work,
        cache_dir=Path(cache),
        reports_dir=Path(os.environ.get("SPARKCAP_REPORTS", "reports")),
        log_level=os.environ.get("SPARKCAP_LOG_LEVEL", "WARNING").upper(),
    )


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
    # Prefect creates its home without parents and fails on a fresh clone
    Path(os.environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)


def read_secret(env_var: str | None) -> SecretStr | None:
    """Read an API key from the variable a config names; ``None`` when unset or empty."""
    if not env_var:
        return None
    value = os.environ.get(env_var)
    return SecretStr(value) if value else None
