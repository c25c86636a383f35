"""The plan on the twin night: dbt's routing carries exactly as many streams
of the mix as a brute force over every allocation finds, every replica stays inside its
capacity line, and ``sparkcap plan`` prints what the marts say and refuses a mix it cannot
mean."""

from __future__ import annotations

import contextlib
import io
import itertools
import math
from pathlib import Path

import duckdb
import pytest

from sparkcap import cli
from sparkcap.servers.sim.fleet import TWIN
from tests.support.cli import cli_in_process
from tests.support.fleets import write_fleet
from tests.support.queries import copy_of, q


@pytest.fixture
def night(twin_night: dict[str, object]) -> tuple[Path, str]:
    return Path(str(twin_night["db"])), str(twin_night["run_id"])


def _servers(db: Path, run_id: str) -> list[tuple[str, int, int]]:
    """(deployment, code capacity, prose capacity) per replica, from fct_capacity and the
    fleet's replicas, not from the plan's own models."""
    rows = q(
        db,
        """
        select c.deployment, any_value(d.replicas),
               coalesce(max(c.capacity_streams) filter (where c.workload = 'code'
                        and c.is_measured), 0),
               coalesce(max(c.capacity_streams) filter (where c.workload = 'prose'
                        and c.is_measured), 0)
        from marts.fct_capacity c join marts.dim_deployments d using (run_id, deployment)
        where c.run_id = ? group by c.deployment order by 1
        """,
        [run_id],
    )
    return [(name, int(code), int(prose)) for name, n, code, prose in rows for _ in range(n or 1)]


def _options(code_cap: int, prose_cap: int) -> list[tuple[int, int]]:
    return [
        (c, p)
        for c in range(code_cap + 1)
        for p in range(prose_cap + 1)
        if (code_cap == 0 and c == 0 and p <= prose_cap)
        or (prose_cap == 0 and p == 0)
        or (code_cap and prose_cap and c * prose_cap + p * code_cap <= code_cap * prose_cap)
    ]


def _brute_force(servers: list[tuple[str, int, int]], code_share: float) -> int:
    best = 0
    for combo in itertools.product(*(_options(c, p) for _, c, p in servers)):
        code, prose = sum(c for c, _ in combo), sum(p for _, p in combo)
        if code == math.floor((code + prose) * code_share + 0.5):
            best = max(best, code + prose)
    return best


def test_the_twin_plan_is_the_brute_force_optimum_inside_every_capacity_line(
    night: tuple[Path, str], twin_night: dict[str, object]
) -> None:
    db, run_id = night
    servers = _servers(db, run_id)
    assert len(servers) == 4 and all(c > 0 and p > 0 for _, c, p in servers), servers
    (plan,) = q(
        db,
        "select planned_streams, planned_code_streams, planned_prose_streams, plan_verdict, "
        "code_share, prefill_verdict from marts.fct_plan where run_id = ?",
        [run_id],
    )
    routing = q(
        db,
        "select deployment, replicas, code_streams, prose_streams, code_capacity_streams, "
        "prose_capacity_streams, capacity_share_used, mixed_basis, prefill_basis, "
        "long_prompts_per_min, long_prompt_routing, probe_prefill_tok_s, prefill_budget_per_min "
        "from marts.fct_plan_routing where run_id = ? order by deployment",
        [run_id],
    )
    assert plan[3] == "planned" and plan[4] == 0.7
    assert plan[0] == _brute_force(servers, 0.7) > 0
    assert plan[1] == math.floor(plan[0] * 0.7 + 0.5) and plan[1] + plan[2] == plan[0]
    assert sum(r[2] for r in routing) == plan[1] and sum(r[3] for r in routing) == plan[2]
    for _, _, _, _, code_cap, prose_cap, used, mixed, prefill, *_ in routing:
        assert used <= 1 + 1e-9 and code_cap > 0 and prose_cap > 0
        assert mixed and prefill  # every deployment says what its mixing and budget rest on
    # the twin probes every deployment's prefill interference, and the simulator stalls decode
    # while a prompt prefills: each budget is measured and bounded, at a prefill rate the
    # probe timed at most the engine's and not below half of it. Idle it reads 0.84-0.89 of it
    # (its TTFT includes the background's decode steps between the prompt's chunks); a busy
    # client stretches that further, and this is a test of the plan, not of client timing
    by_name = {r[0]: r for r in routing}
    truth = {d.name: d.prefill_tok_s for d in TWIN}
    for d, r in by_name.items():
        assert r[8].startswith("decode fell below the threshold for the prefill"), r
        assert 0.5 < r[11] / truth[d] <= 1.0, (d, r[11], truth[d])
        assert r[12] == pytest.approx(r[1] * 0.05 * 60 * r[11] / 32000), r
    # the plan's long prompts (the default 2 a minute) are routed as fct_plan's prefill
    # verdict counts them: in proportion to the measured budgets, so the fastest prefill
    # (qwen's two replicas) takes most and the slowest (deepseek's) least
    budget = sum(r[12] for r in routing)
    for r in routing:
        assert r[9] == pytest.approx(2.0 * r[12] / budget), r
        assert r[10] == "routed in proportion to its prefill budget", r
    shares = sorted(by_name, key=lambda d: by_name[d][9])
    assert shares == ["deepseek", "glm", "qwen"], {d: by_name[d][9] for d in by_name}
    assert plan[5] == f"exceeds the budget of {round(budget, 2)} per minute", (plan, budget)
    # the night's report shows the plan its build made (the project's default mix)
    page = Path(str(twin_night["report"])).read_text(encoding="utf-8")
    assert "<h2>Plan</h2>" in page
    assert f"{plan[0]} concurrent streams ({plan[1]} code, {plan[2]} prose)" in page


def test_plan_prints_the_marts_for_another_mix_and_refuses_a_bad_one(
    night: tuple[Path, str], tmp_path: Path
) -> None:
    db, run_id = night
    copy = copy_of(db, tmp_path, "w.duckdb")
    out, err = io.StringIO(), io.StringIO()
    args = ["plan", "--mix", "code=0.5,prose=0.5", "--long-prompts", "1/min@16k"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        cli.main([*args, "--db", str(copy)])
    ((n, code, verdict),) = q(
        copy,
        "select planned_streams, planned_code_streams, prefill_verdict from marts.fct_plan "
        "where run_id = ?",
        [run_id],
    )
    assert n == _brute_force(_servers(copy, run_id), 0.5)
    lines = out.getvalue().splitlines()
    # the plan in requests a minute first (open-loop capacity), then the study's burst figure
    assert "50% code / 50% prose requests" in lines[0], lines
    assert "requests a minute" in lines[1] and "users at a 30 s think time" in lines[1], lines
    burst = next(x for x in lines if "concurrent streams" in x)
    assert f"{n} concurrent streams ({code} code" in burst and "50% code" in burst, lines
    assert "1/min of 16000 tokens" in out.getvalue() and verdict in out.getvalue()
    for bad, needle in (
        (["--mix", "code=0.7,prose=0.2"], "add to 0.9"),
        (["--mix", "agent=1"], "expected code=SHARE"),
        (["--long-prompts", "2/min"], "expected RATE/min@TOKENS"),
    ):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
            cli.main(["plan", *bad, "--db", str(copy)])
        assert exit_.value.code == 1
        lines = err.getvalue().strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines


def _fleet(path: Path, names: list[str]) -> Path:
    """A fleet file of the twin's deployments by name, each at a port nothing listens on."""
    workloads = {"levels": [1, 2], "trials": 1}
    deployments = [{"name": n, "model": n, "endpoint": "http://127.0.0.1:9/v1"} for n in names]
    fleet = {
        "name": "down",
        "workloads": {"code": workloads, "prose": workloads},
        "deployments": deployments,
    }
    return write_fleet(path, fleet)


def _replay_exit(args: list[str]) -> tuple[int, str, str]:
    p = cli_in_process("replay", "--duration", "5", "--long-prompts", "0", *args)
    return p.returncode, p.stdout, p.stderr


@pytest.mark.reliability
def test_a_replay_never_holds_without_a_planned_deployment(
    night: tuple[Path, str], tmp_path: Path
) -> None:
    """A plan replayed in part is not the plan: a fleet file without a planned deployment is
    refused before anything is sent (one line, exit 1), and a planned deployment whose server
    cannot be reached is named "not replayed" and the plan never holds (exit 3)."""
    db, run_id = night
    copy = copy_of(db, tmp_path, "w.duckdb")
    names = [n for n, _, _ in _servers(copy, run_id)]
    names = sorted(set(names))
    code, out, err = _replay_exit(["--fleet", str(_fleet(tmp_path / "one.yaml", names[:1])),
                                   "--db", str(copy)])  # fmt: skip
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1, (code, out, err)
    assert lines[0].startswith("error: the plan routes load to ") and names[1] in lines[0], lines
    assert "which the fleet file does not name" in lines[0], lines

    code, out, err = _replay_exit(["--fleet", str(_fleet(tmp_path / "all.yaml", names)),
                                   "--db", str(copy)])  # fmt: skip
    assert code == 3, (code, out, err)
    first = out.splitlines()[0]
    assert "the plan is not shown to hold: not replayed at " in first, out
    rows = q(copy, "select deployment, verdict, verdict_text, n_requests from marts.fct_replay")
    assert rows and all(v == "not replayed" and n == 0 for _, v, _, n in rows), rows
    for deployment, _, words, _ in rows:
        assert deployment in first and f"  {deployment}: not replayed: " in out, out
        assert words.startswith("not replayed: "), words


def _one_error_line(args: list[str]) -> str:
    p = cli_in_process(*args)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1, (args, p.stdout, p.stderr)
    assert lines[0].startswith("error: ") and p.stdout == "", (args, lines)
    return lines[0]


@pytest.mark.reliability
def test_plan_replay_and_build_refuse_what_they_cannot_read_in_one_line(
    night: tuple[Path, str], tmp_path: Path
) -> None:
    """No warehouse (nothing created), an empty one, one built by an older sparkcap (a model
    the plan reads missing), a threshold that is no threshold, a long-prompt rate past any
    range: one line each, exit 1, never dbt's own output."""
    missing = tmp_path / "nowhere" / "w.duckdb"
    fleet = ["--fleet", str(_fleet(tmp_path / "f.yaml", ["qwen"]))]
    for command in (["plan"], ["replay", *fleet]):
        line = _one_error_line([*command, "--db", str(missing)])
        assert line == f"error: no warehouse at {missing}: run a night (or `sparkcap sweep`) first"
    assert not missing.parent.exists()
    empty = tmp_path / "empty.duckdb"
    duckdb.connect(str(empty)).close()
    for command in (["plan"], ["replay", *fleet]):
        line = _one_error_line([*command, "--db", str(empty)])
        assert line == (
            f"error: no capacity results in {empty} yet: run `sparkcap build --db {empty}`"
        )
    db, _ = night
    older = copy_of(db, tmp_path, "older.duckdb")
    with duckdb.connect(str(older)) as con:
        con.execute("drop table intermediate.int_level_diagnosis")
    line = _one_error_line(["plan", "--db", str(older)])
    assert "was built by an older sparkcap" in line and "run `sparkcap build --db" in line, line
    for threshold, why in (("nan", "finite"), ("inf", "finite"), ("1e308", "at most 100000"),
                           ("-5", "greater than 0"), ("0", "greater than 0")):  # fmt: skip
        line = _one_error_line(["build", "--threshold", threshold, "--db", str(older)])
        assert line.startswith("error: --threshold threshold_tok_s: ") and why in line, line
    line = _one_error_line(["replay", *fleet, "--run", "nosuchrun", "--db", str(older)])
    assert line == f"error: no such run in {older}: nosuchrun", line
    nines = "9" * 400
    line = _one_error_line(["plan", "--long-prompts", f"{nines}/min@1", "--db", str(older)])
    assert "--long-prompts (plan_long_prompts_per_min): inf must be a finite number" in line
