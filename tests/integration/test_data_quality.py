"""Data-quality gates: short outputs and missing completion lengths are caught, kept as
evidence, and keep the affected trials out of capacity numbers."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from sparkcap.config.plan import SweepPlan, SweepRequest
from sparkcap.dq.offline import remote_resources
from sparkcap.night.sweeps import run_sweeps
from sparkcap.servers.sim.server import SimServer
from sparkcap.transform.dbt_build import build
from tests.support.cli import cli_in_process
from tests.support.queries import q
from tests.support.sims import dep, fast_profile, faulty
from tests.support.timing import RELAXED_TIMING, SHORT_STREAM_VARS

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def sim() -> SimServer:
    profiles = [
        fast_profile("clean"),
        faulty("short", every=3, short_output_tokens=5),
        faulty("nousage", every=3, omit_usage=True),
        # a thinking model whose thinking was left on: each stream's first 4 tokens reason
        fast_profile("thinker", reasoning_tokens=4),
    ]
    with SimServer(profiles) as s:
        yield s


def sweep_into(sim: SimServer, db: Path, *models: str) -> str:
    reqs = [
        SweepRequest(
            deployment=dep(sim.endpoint, model, extra_body={"ignore_eos": True}),
            workload=wl,  # type: ignore[arg-type]
            plan=SweepPlan(levels=(1, 2, 4), trials=2, max_tokens=16, max_remeasures=0),
        )
        for model in models
        for wl in ("code", "prose")
    ]
    return asyncio.run(run_sweeps(reqs, db)).run_id


def assert_opens_offline(index: Path) -> None:
    pages = [index, *index.parent.rglob("validations/**/*.html")]
    assert len(pages) >= 2
    for page in pages:
        assert remote_resources(page) == [], page
        text = page.read_text(encoding="utf-8")
        for ref in re.findall(r'(?:src|href)="([^"#?]+\.(?:css|js))"', text):
            assert (page.parent / ref).resolve().exists(), (page, ref)


@dataclass(frozen=True)
class CleanNight:
    db: Path
    run_id: str
    validate: CompletedProcess[str]  # `sparkcap validate --db DB --out OUT`, no --run


@pytest.fixture(scope="module")
def clean_night(sim: SimServer, tmp_path_factory: pytest.TempPathFactory) -> CleanNight:
    """A clean sweep, a prompt-cache probe on a server that ends every third reply early (no
    ignore_eos), then a link-check run started after both; validated once, as a person does,
    with no --run, and read by every test of it (a validation apiece would cost a night each)."""
    root = tmp_path_factory.mktemp("clean")
    db = root / "clean.duckdb"
    # wider than a test: set up before the autouse fixture relaxes the timing rule, so it
    # passes the one setting itself (16-token streams: about data quality)
    with pytest.MonkeyPatch.context() as relaxed:
        for k, v in RELAXED_TIMING.items():
            relaxed.setenv(k, v)
        return _clean_night(sim, root, db)


def _clean_night(sim: SimServer, root: Path, db: Path) -> CleanNight:
    import time

    from sparkcap.night.sweeps import run_probe
    from sparkcap.store.runs import run_end_to, run_start_to

    run_id = sweep_into(sim, db, "clean")
    asyncio.run(
        run_probe(
            dep(sim.endpoint, "short"),  # every third reply ends after 5 tokens
            "prompt-cache",
            db,
            run_id=run_id,
            record_run=False,
            document_tokens=300,
            warm_requests=3,
            answer_tokens=12,
        )
    )
    link_run = "29991231T000000Z-linkck"  # newer than anything
    run_start_to(db, link_run, {"link_check": {}}, time.time_ns())
    run_end_to(db, link_run, "complete")
    p = cli_in_process("validate", "--db", str(db), "--out", str(root / "dq"))
    return CleanNight(db=db, run_id=run_id, validate=p)


def outcomes(night: CleanNight) -> list[tuple[str, str, bool, bool, str | None]]:
    """The validation's overall results: (suite, expectation, blocking, success, sample ids)."""
    return q(  # type: ignore[return-value]
        night.db,
        "select suite, expectation, blocking, success, sample_ids from raw.dq_results "
        "where run_id = ? and wave_id is null",
        [night.run_id],
    )


def test_clean_sweep_passes_every_blocking_expectation(clean_night: CleanNight) -> None:
    p = clean_night.validate
    assert p.returncode == 0, p.stdout + p.stderr
    found = outcomes(clean_night)
    assert all(ok for _, _, blocking, ok, _ in found if blocking), found
    assert {e for _, e, _, _, _ in found} >= {
        "completion_length_present",
        "code_output_length_exact",
        "prose_output_length_within_tolerance",
        "chunk_times_non_decreasing",
        "wave_has_every_stream",
        "failure_rate_under_ceiling",
        "count_source_is_usage",
        "ttft_within_timeout",
        "first_token_not_after_last",
        "warmup_wave_present",
    }
    (docs,) = [line for line in p.stdout.splitlines() if line.startswith("data docs: ")]
    assert_opens_offline(Path(docs.removeprefix("data docs: ")))
    rows = q(
        clean_night.db,
        "select count(*), bool_and(success) from raw.dq_results where run_id = ? and blocking",
        [clean_night.run_id],
    )
    assert rows[0][0] > 0 and rows[0][1] is True


@dataclass(frozen=True)
class BadNight:
    db: Path
    run_id: str
    out: Path
    validate: CompletedProcess[str]  # `sparkcap validate --db DB --run RUN --out OUT`
    reasons_before: dict[str, str | None]  # fct_trials' invalid_reasons built before it


@pytest.fixture(scope="module")
def bad_night(sim: SimServer, tmp_path_factory: pytest.TempPathFactory) -> BadNight:
    """One run of both faulty deployments (one ends every third reply early, the other omits
    every third usage), built, validated and built again, as a night that is validated after
    its build, once for every case and the rebuild test (a validation apiece would cost a night
    each); each case reads its own deployment's waves."""
    root = tmp_path_factory.mktemp("bad")
    db = root / "bad.duckdb"
    with pytest.MonkeyPatch.context() as relaxed:  # as the clean night: 16-token streams
        for k, v in RELAXED_TIMING.items():
            relaxed.setenv(k, v)
        run_id = sweep_into(sim, db, "short", "nousage", "thinker")
        marts = "+fct_trials +fct_levels +fct_capacity"
        build(db, select=marts, dbt_vars=SHORT_STREAM_VARS)
        before = q(
            db, "select wave_id, invalid_reasons from marts.fct_trials where run_id = ?", [run_id]
        )
        out = root / "dq"
        p = cli_in_process("validate", "--db", str(db), "--run", run_id, "--out", str(out))
        build(db, select=marts, dbt_vars=SHORT_STREAM_VARS)  # incremental: this run again
    return BadNight(
        db=db,
        run_id=run_id,
        out=out,
        validate=p,
        reasons_before={str(w): None if r is None else str(r) for w, r in before},
    )


@pytest.mark.parametrize(
    ("model", "expectation"),
    [
        ("short", "code_output_length_exact"),
        ("nousage", "completion_length_present"),
        ("thinker", "reasoning_as_intended"),
    ],
)
def test_bad_outputs_fail_validation_and_leave_capacity(
    bad_night: BadNight, model: str, expectation: str
) -> None:
    db_path, run_id, out, p = bad_night.db, bad_night.run_id, bad_night.out, bad_night.validate
    assert p.returncode == 1, p.stdout + p.stderr
    assert expectation in p.stderr.splitlines()[-1]
    assert p.stderr.startswith("error: blocking expectations failed")
    assert (out / "data_docs" / "index.html").exists() and (out / "summary.html").exists()
    assert_opens_offline(out / "data_docs" / "index.html")
    summary = (out / "summary.html").read_text()
    assert "FAIL" in summary and expectation in summary

    # evidence in the warehouse: the deployment's offending waves and request ids
    bad_waves = {
        r[0]
        for r in q(
            db_path,
            "select wave_id from raw.dq_results where run_id = ? and expectation = ? "
            "and deployment = ? and wave_id is not null and not success",
            [run_id, expectation, model],
        )
    }
    assert bad_waves
    trials = q(
        db_path,
        "select wave_id, is_valid, invalid_reasons from marts.fct_trials "
        "where run_id = ? and deployment = ?",
        [run_id, model],
    )
    for wave_id, is_valid, reasons in trials:
        if wave_id in bad_waves:
            assert is_valid is False and "data-quality" in reasons and expectation in reasons
    counted_bad = [w for w in bad_waves if not w.endswith("/t0")]
    assert counted_bad
    # the capacity inputs (valid trials) exclude exactly those trials
    mine = [run_id, model]
    n_valid = q(
        db_path,
        "select sum(n_valid_trials) from marts.fct_levels where run_id = ? and deployment = ?",
        mine,
    )[0][0]
    n_counted = q(
        db_path,
        "select count(*) from marts.fct_trials where run_id = ? and deployment = ? and trial > 0",
        mine,
    )[0][0]
    assert n_valid <= n_counted - len(counted_bad)
    cap_inputs = q(
        db_path,
        "select sum(n_valid_trials) from marts.fct_capacity where run_id = ? and deployment = ?",
        mine,
    )[0][0]
    assert cap_inputs == n_valid


@pytest.mark.reliability
def test_a_model_thinking_by_mistake_is_named_with_its_time_to_the_first_answer(
    bad_night: BadNight,
) -> None:
    """The study measured with reasoning off (the default setting): a deployment whose streams
    reasoned anyway measured another workload. Each stream shows it (reasoning tokens from
    usage, the reasoning text's characters, TTFT to the first token on any channel and the
    time to the first answer token after it); the other deployments' streams show none."""
    rows = q(
        bad_night.db,
        "select deployment, reasoned, reasoning_hidden, reasoning_tokens, reasoning_chars, "
        "ttft_s, ttfo_s from intermediate.int_stream_rates "
        "where run_id = ? and status = 'ok' order by request_id",
        [bad_night.run_id],
    )
    thinker = [r for r in rows if r[0] == "thinker"]
    others = [r for r in rows if r[0] != "thinker"]
    assert thinker and others
    for _, reasoned, hidden, tokens, chars, ttft_s, ttfo_s in thinker:
        assert reasoned and not hidden and tokens == 4 and chars > 0, thinker
        # the answer begins after the reasoning, or in the same read of the socket (chunks
        # read together share their arrival stamp: a client loop that stalled reads both)
        assert ttfo_s >= ttft_s, thinker
    later = [r for r in thinker if r[6] > r[5]]
    assert len(later) > len(thinker) / 2, thinker  # most streams read reasoning, then answer
    assert not any(r[1] for r in others), others
    assert all(r[6] == r[5] for r in others), others  # no reasoning: the first token answers
    waves = q(
        bad_night.db,
        "select deployment, reasoning_intended, n_reasoned, reasoning_as_intended "
        "from intermediate.int_dq_waves where run_id = ?",
        [bad_night.run_id],
    )
    assert {(d, i, ok) for d, i, _, ok in waves if d == "thinker"} == {("thinker", "off", False)}
    assert all(ok for d, _, _, ok in waves if d != "thinker"), waves
    summary = (bad_night.out / "summary.html").read_text(encoding="utf-8")
    assert "reasoning_as_intended" in summary and "measures another workload" in summary


def test_validation_after_build_triggers_rebuild_of_that_run(bad_night: BadNight) -> None:
    """The bad night's trials were built before its validation, and only a validation says
    "data-quality": its failures moved the run's watermark, so the next (incremental) build
    judged the run again and every wave a blocking expectation flagged now carries it."""
    db_path, run_id = bad_night.db, bad_night.run_id
    flagged = q(
        db_path,
        "select wave_id, list(distinct expectation) from raw.dq_results where run_id = ? "
        "and wave_id is not null and blocking and not success group by 1",
        [run_id],
    )
    after = dict(
        q(
            db_path,
            "select wave_id, invalid_reasons from marts.fct_trials where run_id = ?",
            [run_id],
        )
    )
    assert flagged and bad_night.reasons_before.keys() == after.keys()
    assert not any("data-quality" in (r or "") for r in bad_night.reasons_before.values())
    for wave_id, expectations in flagged:
        reasons = str(after[wave_id])
        assert "data-quality" in reasons and all(e in reasons for e in expectations), reasons


@pytest.mark.reliability
def test_validate_without_run_takes_the_newest_sweep_not_a_link_check(
    clean_night: CleanNight, tmp_path: Path
) -> None:
    """A link-check run (no waves) started after the sweep: `sparkcap validate` with no --run
    validates the sweep instead of erroring on the link check."""
    import time

    from sparkcap.store.runs import run_start_to

    p = clean_night.validate
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == f"run {clean_night.run_id}"
    link_run = "29991231T000000Z-linkck"
    assert q(clean_night.db, "select count(*) from raw.runs where run_id = ?", [link_run]) == [
        (1,)
    ]  # the link check really was the newest run
    empty = tmp_path / "only-links.duckdb"
    run_start_to(empty, link_run, {"link_check": {}}, time.time_ns())
    p = cli_in_process("validate", "--db", str(empty))
    assert p.returncode == 1
    assert "none of the 1 run(s)" in p.stderr and "skipped" in p.stderr


@pytest.mark.reliability
def test_probe_requests_have_their_own_suite_and_never_fail_a_night(
    clean_night: CleanNight,
) -> None:
    """A server that ends probe replies early (no ignore_eos) must not fail the night through
    the code/prose length rules: probe requests get their own, non-blocking suite."""
    n_short = q(
        clean_night.db,
        "select count(*) from raw.requests r join raw.waves w using (wave_id) "
        "where r.run_id = ? and w.probe is not null and r.status = 'short'",
        [clean_night.run_id],
    )[0][0]
    assert n_short > 0  # the probe really had short replies
    assert clean_night.validate.returncode == 0, clean_night.validate.stderr
    found = outcomes(clean_night)
    probe = [o for o in found if o[0] == "probe_requests"]
    assert probe and all(not blocking for _, _, blocking, _, _ in probe), probe
    sweep_ids = ",".join(str(ids or "") for suite, _, _, _, ids in found if suite == "requests")
    assert "prompt-cache" not in sweep_ids
