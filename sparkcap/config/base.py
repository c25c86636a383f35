"""What every config model is made of: the strict base model, the bounds on token counts and
timeouts, and the names of workloads and profiles."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

WorkloadName = Literal["code", "prose", "agent"]
# the workloads whose every request is one prompt (probes build theirs from these)
StreamWorkloadName = Literal["code", "prose"]
# how much of a fleet file's plan a night runs (night.plan.PROFILES says what each changes)
Profile = Literal["full", "demo", "smoke"]
EnvVarName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]

# Token lengths a config may ask for (output lengths, prompt and document sizes). A million is
# far above any model's output limit, and 20x it (the largest sustain factor) still fits the
# int32 token columns of the raw warehouse: a typo such as 3000000000 is refused up front
# instead of being sent, or wrapping where it is stored.
MAX_TOKENS = 1 << 20
OutputTokens = Annotated[int, Field(ge=2, le=MAX_TOKENS)]
# A timeout is a bound the night relies on: ``inf`` (YAML ``.inf``, or ``1e309``) would switch
# it off, so a timeout is finite and at most a day.
MAX_TIMEOUT_S = 86_400.0


def whole_numbers(message: str) -> BeforeValidator:
    """A list of whole numbers checked as written, before pydantic's lax ints would take YAML's
    ``true`` as 1 (and ``2.0`` or ``"2"`` as 2): an item that is not an int is refused with
    ``message``."""

    def ints_only(v: Any) -> Any:
        if isinstance(v, list | tuple) and any(type(x) is not int for x in v):
            raise ValueError(message)
        return v

    return BeforeValidator(ints_only)


class Strict(BaseModel):
    # NaN and infinity are never a meaningful setting (``read_idle_s: .inf`` switches a
    # timeout off; ``gt``/``lt`` bounds do not catch NaN in every field)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
