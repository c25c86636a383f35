"""``sparkcap plan``'s inputs as dbt vars: the plan itself is dbt's (models/marts/plan); this
only turns ``--mix code=0.7,prose=0.3`` and ``--long-prompts 2/min@32k`` into the vars those
models read, refusing what would make them plan something the person did not ask for."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from sparkcap.errors import BuildError, MissingFile, NotBuilt
from sparkcap.store.connection import has_table, open_warehouse
from sparkcap.transform.dbt_build import BuildResult, build, var_refusal

# the plan's models, built together with their data tests by `sparkcap plan`
PLAN_MODELS = (
    "int_plan_servers",
    "int_plan_states",
    "int_plan_chosen",
    "int_plan_deployment_routing",
    "int_plan_mixed_check",
    "int_plan_prefill_budget",
    "fct_plan_routing",
    "fct_plan",
    # the open-loop model and the plan in rates (think_time_s moves the users figure)
    "int_open_loop_inputs",
    "int_open_loop_engine",
    "int_open_loop_curve",
    "fct_open_loop_capacity",
    "fct_open_loop_curve",
    "fct_plan_rates",
    # the arrival rates that replay the plan open-loop (sparkcap replay)
    "fct_replay_plan",
)
PLAN_WORKLOADS = ("code", "prose")
# the option each plan var comes from, to name it when a value is refused
_FLAGS = {
    "plan_code_share": "--mix",
    "plan_long_prompts_per_min": "--long-prompts",
    "plan_long_prompt_tokens": "--long-prompts",
    "plan_max_below_threshold_share": "--max-below-share",
    "think_time_s": "--think",
}
_RATE = re.compile(
    r"^\s*(?P<rate>\d+(?:\.\d+)?)\s*/\s*(?P<per>min|h)\s*@\s*(?P<tokens>\d+(?:\.\d+)?)\s*(?P<k>k?)\s*$"
)


def _share(item: str, value: str) -> float:
    try:
        share = float(value)
    except ValueError:
        raise BuildError(f"--mix {item!r}: {value!r} is not a number") from None
    if not math.isfinite(share) or not 0 <= share <= 1:
        raise BuildError(f"--mix {item!r}: a share is between 0 and 1")
    return share


def parse_mix(text: str) -> float:
    """The code share of ``code=0.7,prose=0.3`` (shares of the plan's streams; the two must
    add to 1, and a workload left out has share 0)."""
    shares: dict[str, float] = {}
    for item in (p.strip() for p in text.split(",")):
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in PLAN_WORKLOADS:
            raise BuildError(f"--mix {item!r}: expected code=SHARE,prose=SHARE")
        if name in shares:
            raise BuildError(f"--mix: {name} is given twice")
        shares[name] = _share(item, value.strip())
    total = sum(shares.values())
    if abs(total - 1) > 1e-9:
        raise BuildError(f"--mix {text!r}: the shares add to {total:g}, not 1")
    return shares.get("code", 0.0)


def parse_long_prompts(text: str) -> tuple[float, int]:
    """(prompts per minute, tokens each) of ``2/min@32k`` (k = 1000 tokens; ``/h`` also
    reads), or ``0`` for none."""
    if text.strip() == "0":
        return 0.0, 0
    m = _RATE.match(text)
    if not m:
        raise BuildError(f"--long-prompts {text!r}: expected RATE/min@TOKENS, e.g. 2/min@32k")
    per_min = float(m["rate"]) / (60 if m["per"] == "h" else 1)
    tokens = float(m["tokens"]) * (1000 if m["k"] else 1)
    if not tokens.is_integer() or tokens < 1:
        raise BuildError(f"--long-prompts {text!r}: a prompt is a whole number of tokens")
    return per_min, int(tokens)


def plan_vars(
    mix: str | None = None,
    long_prompts: str | None = None,
    max_below_share: float | None = None,
    think_s: float | None = None,
) -> dict[str, Any]:
    """The vars of the options given; an option not given is no var, so the plan reads the
    default dbt declares (``dbt_project.yml``, or ``SPARKCAP_DBT_VARS``), declared once."""
    out: dict[str, Any] = {}
    if mix is not None:
        out["plan_code_share"] = parse_mix(mix)
    if long_prompts is not None:
        per_min, tokens = parse_long_prompts(long_prompts)
        out["plan_long_prompts_per_min"] = per_min
        if tokens:  # none planned: the project's default length only words the budget
            out["plan_long_prompt_tokens"] = tokens
    if max_below_share is not None:
        if not math.isfinite(max_below_share) or not 0 < max_below_share <= 1:
            raise BuildError("--max-below-share: a share of time, greater than 0 and at most 1")
        out["plan_max_below_threshold_share"] = max_below_share
    if think_s is not None:
        if not (math.isfinite(think_s) and 0 <= think_s <= 86_400):
            raise BuildError("--think: seconds between a user's requests, 0 to 86400")
        out["think_time_s"] = think_s
    for name, value in out.items():  # each within the range its var has a meaning in
        why = var_refusal(name, value)
        if why:
            raise BuildError(f"{_FLAGS[name]} ({name}): {value!r} {why}")
    return out


def build_plan(db_path: Path, dbt_vars: dict[str, Any]) -> BuildResult:
    """The plan's models and their data tests, with ``dbt_vars`` over the environment's; the
    capacities they read stay as the night's build left them. A warehouse that is not there,
    holds no built capacity, or was built by an older sparkcap (a model the plan reads is
    missing) is refused in one line naming the build to run; nothing is created."""
    if not Path(db_path).is_file():
        raise MissingFile(f"no warehouse at {db_path}: run a night (or `sparkcap sweep`) first")
    with open_warehouse(db_path, read_only=True) as con:
        built = has_table(con, "marts", "fct_capacity")
    if not built:
        raise NotBuilt(f"no capacity results in {db_path} yet: run `sparkcap build --db {db_path}`")
    try:
        return build(db_path, select=" ".join(PLAN_MODELS), dbt_vars=dbt_vars)
    except BuildError as exc:
        if "does not exist" not in str(exc):
            raise
        raise NotBuilt(
            f"{db_path} was built by an older sparkcap (a model the plan reads is missing): "
            f"run `sparkcap build --db {db_path}` once, then plan"
        ) from None
