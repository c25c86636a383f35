"""Fleet files: the deployments, workloads, threshold and schedule of a nightly sweep.

Validation errors name the file and the line of the offending key, because a fleet file is
edited by hand and a bare pydantic path (``deployments.2.levels.0``) is hard to find.
A deployment either points at a running ``endpoint`` or asks sparkcap to ``launch`` a local
llama-server for the run (``fleets/local.yaml``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    HttpUrl,
    ValidationError,
    field_validator,
    model_validator,
)

from sparkcap.config.base import WorkloadName
from sparkcap.config.deployment import Deployment, DeploymentBase
from sparkcap.config.plan import SweepPlan, SweepRequest, planned_wave_count
from sparkcap.config.probes import ProbeName, ProbeOptions
from sparkcap.errors import FleetError


class LinkSpec(BaseModel):
    """One link of a deployment, as a fleet file declares it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    a: str = ""
    b: str = ""
    nominal_gbps: float = Field(gt=0)
    command: str = Field(min_length=1)
    format: Literal["iperf3-json", "ib-bw", "plain"] = "iperf3-json"
    timeout_s: float = Field(60.0, gt=0)


# llama-server's request slots when a launch names none (sparkcap passes -np 4)
LLAMA_DEFAULT_SLOTS = 4


class _Strict(BaseModel):
    # as config.Strict: no NaN or infinity (`poll_s: .inf` would wait for ever)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Launch(_Strict):
    """A server sparkcap starts for the run and stops after it.

    ``llama-server``: llama.cpp, built once into the cache. ``sim``: the simulated twin fleet
    (one process serves every ``sim`` deployment, chosen by model name).

    ``slots`` is llama-server's ``-np`` (4 when left out). The simulator takes its slots from
    its own profile, so a sim launch refuses ``slots``: a setting the launch does not apply
    must never be recorded as the server's fact (the study: configured slots alone are
    insufficient, and a default of 4 once read as "4 slots for 16 streams" on a server that
    admits 256).
    """

    kind: Literal["llama-server", "sim"] = "llama-server"
    slots: int | None = Field(None, ge=1, le=64)
    context: int = Field(8192, ge=256)
    threads: int | None = Field(None, ge=1)
    spec_type: str | None = None
    port: int = Field(0, ge=0, le=65535)
    extra_args: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _slots_where_applied(self) -> Launch:
        if self.kind == "sim" and self.slots is not None:
            raise ValueError(
                "slots applies to llama-server (-np) only: the simulator admits what its "
                "profile's max_slots says"
            )
        return self

    def applied_slots(self) -> int | None:
        """The request slots this launch gives its server: llama-server's ``-np`` (the
        default 4 is applied too, so it is a fact); None for the simulator."""
        if self.kind == "llama-server":
            return self.slots if self.slots is not None else LLAMA_DEFAULT_SLOTS
        return None


class FleetDeployment(DeploymentBase):
    """A deployment in a fleet file: an endpoint, or a server sparkcap launches for the night,
    plus what to run against it."""

    endpoint: HttpUrl | None = None
    launch: Launch | None = None
    workloads: tuple[WorkloadName, ...] | None = Field(
        None, description="subset of the fleet's workloads to run here (default: all)"
    )
    plans: dict[WorkloadName, SweepPlan] = Field(
        default_factory=dict, description="per-workload plan overriding the fleet's"
    )
    probes: dict[ProbeName, ProbeOptions] = Field(
        default_factory=dict,
        description="responsiveness probes to run after the sweeps, with their options",
    )

    links: tuple[LinkSpec, ...] = Field(
        (), description="interconnect links to check, each with its probe command"
    )
    shares: tuple[str, ...] = Field(
        (),
        description="links or nodes this deployment shares with others (e.g. 'spark-3', "
        "'ring-a'): deployments naming one are never swept at the same time by distributed "
        "workers",
    )

    @field_validator("probes", mode="before")
    @classmethod
    def _kind_from_key(cls, v: Any) -> Any:
        """In a fleet file a probe's options sit under its name: the name is the kind."""
        if isinstance(v, dict):
            return {
                k: {**(o or {}), "kind": k} if isinstance(o, dict | None) else o
                for k, o in v.items()
            }
        return v

    @model_validator(mode="after")
    def _endpoint_or_launch(self) -> FleetDeployment:
        if (self.endpoint is None) == (self.launch is None):
            raise ValueError("give exactly one of 'endpoint' or 'launch'")
        return self

    def resolve(self, endpoint: str | None = None) -> Deployment:
        """The concrete deployment, with the endpoint of a launched server filled in."""
        url = endpoint or (str(self.endpoint) if self.endpoint else None)
        if url is None:
            raise FleetError(f"deployment {self.name} has not been launched")
        slots = self.parallel_slots or (self.launch.applied_slots() if self.launch else None)
        shared = {name: getattr(self, name) for name in DeploymentBase.model_fields}
        return Deployment(**{**shared, "parallel_slots": slots}, endpoint=url)


class Schedule(_Strict):
    """When the night runs; ``sparkcap prefect-yaml`` turns it into the Prefect deployment."""

    cron: str = "0 2 * * *"
    timezone: str = "UTC"
    active: bool = True

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, v: str) -> str:
        """A zone Python does not know would reach prefect.yaml and fail only at deploy time.
        (The cron is checked by ``sparkcap prefect-yaml`` with Prefect's own rule: importing
        Prefect here would fix its settings before the CLI has chosen its home.)"""
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError, OSError):  # `Europe` is a folder; too long
            raise ValueError(
                f"unknown time zone {v!r} (give an IANA name such as Europe/Berlin)"
            ) from None
        return v


class Distributed(_Strict):
    """How a night is spread over Prefect workers on many client hosts
    (``sparkcap.night.distributed``).

    ``enabled`` makes ``sparkcap run`` distributed without ``--distributed``. The lake is an
    fsspec URL or a path every worker host and the parent can reach (default
    ``$SPARKCAP_HOME/lake``). ``host_stream_budget``: streams one client host may hold open at
    once, over all the sweeps its worker runs (from ``benchmarks/client_ceiling.py``).
    """

    enabled: bool = False
    pool: str = Field("sparkcap-sweeps", min_length=1)
    lake: str | None = None
    host_stream_budget: int = Field(256, ge=1)
    # a child whose heartbeat is older than this is lost (its worker or host died)
    stall_s: float = Field(180.0, ge=5)
    # a child taken by a worker that has not beaten this long is given up (its process start,
    # imports and pull steps come first); None: stall_s
    start_s: float | None = Field(None, ge=5)
    # how long the parent waits for every child before naming the rest as missing
    window_s: float = Field(12 * 3600.0, gt=0)
    # a slot a dead child held is freed when its lease runs out (Prefect's minimum is 60 s)
    lease_s: float = Field(300.0, ge=60)
    poll_s: float = Field(5.0, gt=0)


class Fleet(_Strict):
    name: str = Field(min_length=1)
    description: str = ""
    # None: not given, so every judgement takes dbt's var threshold_tok_s (SPARKCAP_DBT_VARS,
    # else the project's 20); a fleet that names one is judged at it
    threshold_tok_s: float | None = Field(None, gt=0, le=100_000)
    schedule: Schedule | None = Field(
        None, description="nightly schedule; fleets without one are run by hand only"
    )
    parallel_deployments: bool = Field(
        False, description="sweep deployments on different machines at the same time"
    )
    workloads: dict[WorkloadName, SweepPlan] = Field(min_length=1)
    deployments: tuple[FleetDeployment, ...] = Field(min_length=1)
    link_min_share: float = Field(
        0.8, gt=0, le=1, description="a link below this share of nominal Gb/s is unhealthy"
    )
    distributed: Distributed = Field(
        default_factory=Distributed,
        description="work pool, lake and budgets for `sparkcap run --distributed`",
    )

    @model_validator(mode="after")
    def _unique_names(self) -> Fleet:
        names = [d.name for d in self.deployments]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"deployment names must be unique: {', '.join(sorted(dup))}")
        return self

    def sweep_requests(self, endpoints: dict[str, str] | None = None) -> list[SweepRequest]:
        endpoints = endpoints or {}
        out: list[SweepRequest] = []
        for d in self.deployments:
            dep = d.resolve(endpoints.get(d.name))
            for wl, plan in self.workloads.items():
                if d.workloads is not None and wl not in d.workloads:
                    continue
                out.append(SweepRequest(deployment=dep, workload=wl, plan=d.plans.get(wl, plan)))
        return out

    def planned_waves(self) -> dict[tuple[str, str], int]:
        """Waves planned per (deployment, workload), before any server is launched."""
        return {
            (d.name, wl): planned_wave_count(d.plans.get(wl, plan))
            for d in self.deployments
            for wl, plan in self.workloads.items()
            if d.workloads is None or wl in d.workloads
        }

    def with_profile(self, **plan_overrides: Any) -> Fleet:
        """The same fleet with every plan adjusted (e.g. the demo's shorter outputs)."""
        return self.map_plans(lambda _, p: p.model_copy(update=plan_overrides))

    def map_plans(self, adj: Callable[[str, SweepPlan], SweepPlan]) -> Fleet:
        """The same fleet with ``adj(workload, plan)`` applied to every plan, the fleet's and
        each deployment's own."""
        return self.model_copy(
            update={
                "workloads": {k: adj(k, v) for k, v in self.workloads.items()},
                "deployments": tuple(
                    d.model_copy(update={"plans": {k: adj(k, v) for k, v in d.plans.items()}})
                    for d in self.deployments
                ),
            }
        )


# a fleet file is text a person edits: even a 100-deployment fleet is a few hundred kB
MAX_FLEET_BYTES = 1 << 20
# nodes a fleet file may expand to, aliases followed: a few hundred per deployment. YAML
# anchors are allowed (a plan shared by deployments), but an alias bomb expands a few hundred
# bytes to billions of nodes, in the line map and again in validation
MAX_FLEET_NODES = 50_000
MAX_FLEET_DEPTH = 64

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Walk:
    """One bounded pass over the composed document, before anything is constructed: the line
    of every key path (for error lines), and refusals of what PyYAML would silently accept
    (duplicate keys: the last wins) or follow without end (aliases)."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.lines: dict[tuple[Any, ...], int] = {}
        self.nodes = 0

    def fail(self, node: yaml.Node, what: str) -> FleetError:
        return FleetError(f"{self.where}:{node.start_mark.line + 1}: {what}")

    def visit(self, node: yaml.Node, path: tuple[Any, ...], on_path: set[int]) -> None:
        self.nodes += 1
        if self.nodes > MAX_FLEET_NODES:
            raise self.fail(
                node,
                f"invalid YAML: expands to more than {MAX_FLEET_NODES} nodes "
                "(an alias repeated too often?)",
            )
        if len(path) > MAX_FLEET_DEPTH:
            raise self.fail(node, f"invalid YAML: nested deeper than {MAX_FLEET_DEPTH} levels")
        self.lines.setdefault(path, node.start_mark.line + 1)
        if not isinstance(node, yaml.MappingNode | yaml.SequenceNode):
            return
        if id(node) in on_path:
            raise self.fail(node, "invalid YAML: an alias refers to a node that contains it")
        on_path.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                self.visit(v, (*path, i), on_path)
        else:
            first: dict[str, int] = {}
            for k, v in node.value:
                if not isinstance(k, yaml.ScalarNode):
                    raise self.fail(k, "invalid YAML: a key must be a plain value")
                key = k.value
                if k.tag != "tag:yaml.org,2002:merge":
                    if key in first:
                        dotted = ".".join(str(x) for x in (*path, key))
                        raise self.fail(
                            k, f"{dotted}: duplicate key (first given at line {first[key]})"
                        )
                    first[key] = k.start_mark.line + 1
                self.lines.setdefault((*path, key), k.start_mark.line + 1)
                self.visit(v, (*path, key), on_path)
        on_path.discard(id(node))


def _read_text(p: Path) -> str:
    try:
        with p.open("rb") as fh:
            raw = fh.read(MAX_FLEET_BYTES + 1)
    except FileNotFoundError:
        raise FleetError(f"{p}: no such fleet file") from None
    except IsADirectoryError:
        raise FleetError(f"{p}: is a folder, not a fleet file") from None
    except OSError as exc:
        raise FleetError(f"{p}: cannot read: {exc.strerror}") from None
    if len(raw) > MAX_FLEET_BYTES:
        raise FleetError(f"{p}: larger than {MAX_FLEET_BYTES} bytes: not a fleet file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise FleetError(
            f"{p}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None


def _parse(p: Path) -> tuple[Any, dict[tuple[Any, ...], int]]:
    """The document and the line of every key path, in time and memory bounded by the
    file's size and ``MAX_FLEET_NODES``, whatever the file holds."""
    text = _read_text(p)
    try:
        node = yaml.compose(text, Loader=_Loader)
        walk = _Walk(str(p))
        if node is None:
            return None, walk.lines
        walk.visit(node, (), set())
        # constructed from the checked node: aliases stay shared objects, never expanded
        data = yaml.SafeLoader("").construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise FleetError(f"{p}{where}: invalid YAML: {problem}") from None
    except RecursionError:  # the pure-Python parser, without libyaml's own nesting bound
        raise FleetError(f"{p}: invalid YAML: nested too deeply") from None
    except (ValueError, TypeError, OverflowError) as exc:
        # a scalar its tag cannot hold: `when: 2001-13-45`, `!!int "0x"`, `!!float x`
        raise FleetError(f"{p}: invalid YAML value: {str(exc)[:200]}") from None
    return data, walk.lines


def _locate(loc: tuple[Any, ...], lines: dict[tuple[Any, ...], int]) -> int | None:
    for n in range(len(loc), -1, -1):
        key = tuple(loc[:n])
        if key in lines:
            return lines[key]
    return None


def location(path: Path | str, *loc: str | int) -> str:
    """``file:line`` of a key path in a fleet file, for errors found after loading it."""
    p = Path(path)
    line = _locate(loc, _parse(p)[1])
    return f"{p}:{line}" if line else str(p)


def load_fleet(path: Path | str) -> Fleet:
    p = Path(path)
    data, lines = _parse(p)
    if not isinstance(data, dict):
        raise FleetError(f"{p}: a fleet file is a mapping with 'deployments' and 'workloads'")
    try:
        return Fleet.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(p, exc, lines) from None


def _validation_error(
    p: Path, exc: ValidationError, lines: dict[tuple[Any, ...], int]
) -> FleetError:
    e = exc.errors()[0]
    loc = tuple(x for x in e["loc"] if not (isinstance(x, str) and x.startswith("function-")))
    # a probe's options are told apart by kind, which pydantic repeats after the probe's key
    loc = tuple(x for i, x in enumerate(loc) if i == 0 or x != loc[i - 1])
    line = _locate(loc, lines)
    where = f":{line}" if line else ""
    dotted = ".".join(str(x) for x in loc) or "(top level)"
    msg = str(e["msg"]).removeprefix("Value error, ")
    if e["type"] == "extra_forbidden":
        msg = "unknown key"
    more = len(exc.errors()) - 1
    tail = f" (+{more} more)" if more else ""
    return FleetError(f"{p}{where}: {dotted}: {msg}{tail}")
