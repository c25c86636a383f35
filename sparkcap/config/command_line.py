"""The command line's flags as config: the text of ``--extra-body``, ``--header``,
``--sessions``, the search options and ``sparkcap probe``'s shared flags, each parsed and checked
where it is read, a flag that cannot be taken as given refused with one line naming it
(:class:`~sparkcap.errors.OptionError`)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from sparkcap.config.deployment import extra_body_problem, header_problem
from sparkcap.config.plan import SearchPlan
from sparkcap.config.probes import ProbeOptions, probe_options
from sparkcap.config.sessions import SessionShape
from sparkcap.errors import OptionError


def parse_extra_body(text: str | None, flag: str = "--extra-body") -> dict[str, Any]:
    """``--extra-body`` as a JSON object, refusing what JSON does not have (``NaN``,
    ``Infinity``) and nesting no request could need, with a message naming ``flag``."""
    if not text:
        return {}

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON number (it would be sent as null)")

    try:
        value = json.loads(text, parse_constant=no_constant)
    except RecursionError:
        raise OptionError(f"{flag} is nested too deeply") from None
    except ValueError as exc:
        raise OptionError(f"{flag} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise OptionError(f"{flag} must be a JSON object, got {type(value).__name__}")
    problem = extra_body_problem(value, flag)
    if problem is not None:
        raise OptionError(problem)
    return value


def parse_session_shape(text: str | None, workload: str, flag: str = "--sessions") -> SessionShape:
    """``--sessions turns=3,answer_tokens=48``: an agent session's shape on the command line,
    the fleet file's ``sessions:`` as NAME=VALUE pairs; what is not named keeps its default.
    Refused with one line naming ``flag``: a pair without ``=``, an unknown or repeated name,
    a value the shape does not allow, or a shape for a workload that sends no sessions."""
    if not text or not text.strip():
        return SessionShape()
    if workload != "agent":
        raise OptionError(f"{flag} shapes agent sessions; --workload {workload} sends none")
    given: dict[str, str] = {}
    for part in text.split(","):
        name, sep, value = (x.strip() for x in part.partition("="))
        if not sep or not name or not value:
            raise OptionError(f"{flag}: {part.strip()!r} is not NAME=VALUE")
        if name not in SessionShape.model_fields:
            known = ", ".join(SessionShape.model_fields)
            raise OptionError(f"{flag}: unknown {name!r} (choose from {known})")
        if name in given:
            raise OptionError(f"{flag}: {name} is given twice")
        given[name] = value
    try:
        return SessionShape.model_validate(given)
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(x) for x in e["loc"]) or "the shape"
        raise OptionError(f"{flag}: {loc}: {e['msg']}") from None


def parse_header_options(
    options: list[str] | None, flag: str = "--header"
) -> tuple[dict[str, str], dict[str, str]]:
    """``--header NAME:VALUE`` and ``NAME:env:VAR`` as (headers, header_env), every name and
    literal value checked; a message never echoes a value (they are secrets)."""
    headers: dict[str, str] = {}
    header_env: dict[str, str] = {}
    for option in options or []:
        name, sep, value = option.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not name:
            raise OptionError(f"{flag}: expected NAME:VALUE, got {name[:40]!r}…")
        if name in headers or name in header_env:
            raise OptionError(f"{flag}: header {name!r} is given twice")
        if value.startswith("env:"):
            header_env[name] = value.removeprefix("env:")
            problem = header_problem(name, "")
        else:
            headers[name] = value
            problem = header_problem(name, value)
        if problem is not None:
            raise OptionError(f"{flag}: {problem}")
    return headers, header_env


def search_plan(
    search: bool,
    max_level: int | None = None,
    trials_max: int | None = None,
    confidence: float | None = None,
    sustain_factor: float | None = None,
    trial_tokens: int | None = None,
) -> SearchPlan | None:
    """The command line's search options as a plan (``None``: a grid). An option given
    without ``--search`` would silently do nothing, so it is refused, named as typed."""
    options = {
        "max_level": max_level,
        "trials_max": trials_max,
        "confidence": confidence,
        "sustain_factor": sustain_factor,
        "trial_tokens": trial_tokens,
    }
    given = {k: v for k, v in options.items() if v is not None}
    if not search:
        if given:
            names = ", ".join("--" + k.replace("_", "-") for k in given)
            verb = "applies" if len(given) == 1 else "apply"
            raise OptionError(f"{names} {verb} only with --search")
        return None
    return SearchPlan(**given)


def probe_flags(
    kind: str,
    *,
    prompt_tokens: int,
    background_streams: int | None,
    background_tokens: int | None,
    probe_interval_s: float,
    warm_requests: int,
    concurrency: int,
    lengths: str,
    workload: str,
    code_share: float,
    trials: int,
    max_tokens: int | None,
    start_tokens: int = 1024,
    context_tokens: int | None = None,
) -> ProbeOptions:
    """``sparkcap probe``'s flags, shared by the four probes, as probe ``kind``'s own options
    (one flag, one meaning: ``--prompt-tokens`` is the long prompt of prefill-interference and
    the document of prompt-cache); validated like a fleet file's probe."""
    by_kind: dict[str, dict[str, Any]] = {
        "prefill-interference": {
            "background_streams": background_streams,
            "background_tokens": background_tokens,
            "long_prompt_tokens": prompt_tokens,
            "probe_interval_s": probe_interval_s,
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
        "gap-attribution": {
            "concurrency": concurrency,
            "trials": trials,
            "max_tokens": max_tokens,
        },
        "context-ladder": {
            "start_tokens": start_tokens,
            "context_tokens": context_tokens,
            "background_streams": background_streams,
            "background_tokens": background_tokens,
            "answer_tokens": max_tokens,
        },
    }
    # a flag left unset (None) is the probe's own default, which differs between probes
    return probe_options(kind, **{k: v for k, v in by_kind[kind].items() if v is not None})
