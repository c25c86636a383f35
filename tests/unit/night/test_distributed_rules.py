"""Every decision the parent of a distributed night takes about a child, as tables: each state
Prefect can report × the child's lake heartbeat × the night's window, then the edges the live
tests (tests/e2e/test_distributed_rules.py) could only reach by waiting on a real clock.

Prefect is read for its StateType enum only: no client is made and no socket opened.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from prefect.client.schemas.objects import TERMINAL_STATES, StateType

from sparkcap.night.distributed import rules
from sparkcap.night.distributed.rules import Finish, Verdict, child_verdict, finish_verdict

STALL_S = 180.0
NOW_S = 10_000.0  # the parent's monotonic clock at this look
OPEN, CLOSED = NOW_S + 60, NOW_S - 60  # the window's end: still ahead, already passed

# what the parent knows of the child's heartbeat: (heartbeat_age_s, silent_since_s)
HEARTBEATS: dict[str, tuple[float | None, float | None]] = {
    "never, just taken": (None, NOW_S - 1),
    "never, taken 2 x stall ago": (None, NOW_S - 2 * STALL_S),
    "fresh": (1.0, NOW_S - 2 * STALL_S),
    "stale": (2 * STALL_S, NOW_S - 1),
}

W, E, L, G, N = Verdict.WAIT, Verdict.ENDED, Verdict.LOST, Verdict.GIVE_BACK, Verdict.NEVER_TAKEN
# state -> verdicts, columns: HEARTBEATS in order with the window open, then the same closed
TABLE: dict[str | None, tuple[Verdict, ...]] = {
    #              open: never (taken now, long ago), fresh, stale | closed: the same four
    "SCHEDULED": (W, W, W, W, N, N, N, N),  # the window cancels a run no worker took
    "PENDING": (W, G, W, W, W, G, W, W),  # taken, never beat: given back; never cancelled
    # beat, then silent: lost, window or not; never beat (killed between Prefect's "running"
    # and the child's first heartbeat): nothing measured, given back
    "RUNNING": (W, G, W, L, W, G, W, L),
    "PAUSED": (W, W, W, W, W, W, W, W),
    "CANCELLING": (W, W, W, W, W, W, W, W),  # someone is cancelling it: Prefect will end it
    "COMPLETED": (E, E, E, E, E, E, E, E),
    "FAILED": (E, E, E, E, E, E, E, E),
    "CANCELLED": (E, E, E, E, E, E, E, E),
    "CRASHED": (E, E, E, E, E, E, E, E),  # Prefect's own crash (its worker saw the run die)
    None: (W, W, W, W, W, W, W, W),  # no state reported yet
}


def _verdict(
    state: str | None,
    age: float | None,
    since: float | None,
    deadline: float = OPEN,
    *,
    now: float = NOW_S,
    may_give_back: bool = True,
    start_s: float = STALL_S,
) -> Verdict:
    return child_verdict(
        state,
        age,
        silent_since_s=since,
        now_s=now,
        deadline_s=deadline,
        stall_s=STALL_S,
        start_s=start_s,
        may_give_back=may_give_back,
    )


def test_the_table_and_the_rules_know_every_state_prefect_reports() -> None:
    prefect_states = {s.value for s in StateType}
    assert set(TABLE) == prefect_states | {None}
    assert prefect_states == rules.STATES
    assert {s.value for s in TERMINAL_STATES} == rules.FINAL_STATES


@pytest.mark.parametrize("state", list(TABLE), ids=str)
def test_what_the_parent_decides_for_each_state_heartbeat_and_window(state: str | None) -> None:
    cells = [(hb, window) for window in ("open", "closed") for hb in HEARTBEATS]
    got = {
        (hb, window): _verdict(state, *HEARTBEATS[hb], OPEN if window == "open" else CLOSED)
        for hb, window in cells
    }
    want = dict(zip(cells, TABLE[state], strict=True))
    assert got == want


def test_silence_is_judged_only_past_stall_s() -> None:
    just = STALL_S + 0.001
    # a heartbeat exactly stall_s old is not yet lost; a moment later it is
    assert _verdict("RUNNING", STALL_S, NOW_S) is W
    assert _verdict("RUNNING", just, NOW_S) is L
    # a run that never beat: counted from when the parent first saw it without a heartbeat
    assert _verdict("RUNNING", None, NOW_S - STALL_S) is W
    assert _verdict("RUNNING", None, NOW_S - just) is G
    assert _verdict("PENDING", None, NOW_S - STALL_S) is W
    assert _verdict("PENDING", None, NOW_S - just) is G


def test_a_child_not_yet_started_is_judged_by_start_s_alone() -> None:
    """A worker process can still be importing 20 s after taking its child (longer than a
    stall), and a child given back then is lost for nothing: the first beat gets ``start_s``,
    every later silence ``stall_s``."""
    start_s = 3 * STALL_S
    for state in ("PENDING", "RUNNING"):
        assert _verdict(state, None, NOW_S - 2 * STALL_S, start_s=start_s) is W
        assert _verdict(state, None, NOW_S - start_s, start_s=start_s) is W
        assert _verdict(state, None, NOW_S - start_s - 0.001, start_s=start_s) is G
    # once it has beaten, start_s no longer counts: silence past stall_s is lost
    assert _verdict("RUNNING", STALL_S + 0.001, NOW_S - 1, start_s=start_s) is L


def test_the_window_closes_only_after_its_end() -> None:
    assert _verdict("SCHEDULED", None, NOW_S, deadline=NOW_S) is W
    assert _verdict("SCHEDULED", None, NOW_S, deadline=NOW_S - 0.001) is N


def test_a_child_is_given_back_once_then_named() -> None:
    """A second worker that took it and died (or a parent that cannot submit again) names it:
    the night cannot pass the same child from worker to worker all night."""
    old = NOW_S - 2 * STALL_S
    assert _verdict("PENDING", None, old, may_give_back=True) is G
    assert _verdict("PENDING", None, old, may_give_back=False) is Verdict.UNSTARTED
    # and the window does not cancel it instead: a worker holds it
    assert _verdict("PENDING", None, old, CLOSED, may_give_back=False) is Verdict.UNSTARTED


def test_waiting_for_a_worker_is_not_silence() -> None:
    """The loopback night's two children that waited scheduled past stall_s were given back the
    moment a worker took them, and ran twice: the clock starts when a worker holds the run."""
    clock = rules.silence_clock
    assert clock("SCHEDULED", None, None, NOW_S) is None
    assert clock(None, None, None, NOW_S) is None
    taken_s = NOW_S + 2 * STALL_S  # taken after waiting scheduled for 2 x stall_s
    assert clock("PENDING", None, None, taken_s) == taken_s
    assert _verdict("PENDING", None, clock("PENDING", None, None, taken_s), now=taken_s) is W
    assert _verdict("RUNNING", None, clock("RUNNING", None, None, taken_s), now=taken_s) is W
    # from then on it keeps counting, pending or running, until the first heartbeat
    later_s = taken_s + STALL_S + 1
    assert clock("RUNNING", None, taken_s, later_s) == taken_s
    assert _verdict("PENDING", None, taken_s, now=later_s) is G
    assert _verdict("RUNNING", None, taken_s, now=later_s) is G
    assert _verdict("RUNNING", None, taken_s, now=later_s, may_give_back=False) is (
        Verdict.UNSTARTED
    )
    # a clock not started is no silence at all
    assert rules.silence_s(None, None, NOW_S) == 0.0
    assert _verdict("PENDING", None, None, CLOSED) is W


def test_a_heartbeat_outweighs_the_time_since_first_seen() -> None:
    """A lost child's silence is its heartbeat's age (the live test's 'no heartbeat for 100 s'),
    and a child that has beaten once started measuring: it is never given back."""
    assert rules.silence_s(100.0, NOW_S - 1, NOW_S) == 100.0
    assert rules.silence_s(None, NOW_S - 7, NOW_S) == 7.0
    assert _verdict("PENDING", 2 * STALL_S, NOW_S - 2 * STALL_S) is W


FINISH: dict[str | None, tuple[Finish, ...]] = {
    #           heartbeat: never, fresh, exactly stall_s, stale
    None: (Finish.NEVER_STARTED,) * 4,  # no status: never ran, whatever beats
    "running": (Finish.LOST, Finish.STILL_RUNNING, Finish.STILL_RUNNING, Finish.LOST),
    "ok": (Finish.ENDED,) * 4,
    "failed": (Finish.ENDED,) * 4,
}


@pytest.mark.parametrize("status", list(FINISH), ids=str)
def test_what_a_finish_makes_of_each_child_from_the_lake(status: str | None) -> None:
    ages = (None, 1.0, STALL_S, 2 * STALL_S)
    assert tuple(finish_verdict(status, age, STALL_S) for age in ages) == FINISH[status]


@pytest.mark.parametrize(
    ("named", "status", "status_reason", "state", "message", "account"),
    [
        # a reason the parent named stands, whatever the lake says
        ("code: lost (…)", "ok", None, "CRASHED", "", ("failed", "code: lost (…)")),
        # the child's own account next, whatever Prefect says of the run
        (None, "ok", None, "CRASHED", "exit -9", ("ok", None)),
        (None, "failed", "preflight: 503", "COMPLETED", "", ("failed", "code: preflight: 503")),
        (None, "failed", None, "FAILED", "", ("failed", "code: failed")),
        # then Prefect's: a run it marked crashed keeps its message
        (
            None, "running", None, "CRASHED", "Flow run infrastructure exited with -9",
            ("failed", "code: child flow run crashed: Flow run infrastructure exited with -9"),
        ),
        (None, None, None, "CANCELLED", "", ("failed", "code: child flow run cancelled")),
        (
            None, None, None, "COMPLETED", "",
            ("failed", "code: finished without a status in the lake"),
        ),
    ],
)  # fmt: skip
def test_how_a_child_ended(
    named: str | None,
    status: str | None,
    status_reason: str | None,
    state: str,
    message: str,
    account: tuple[str, str | None],
) -> None:
    assert rules.child_account("code", named, status, status_reason, state, message) == account


def test_the_reasons_name_the_workload_the_host_and_the_silence() -> None:
    assert rules.lost_reason("code", "21 s", "host-a") == (
        "code: lost (no heartbeat for 21 s from client host host-a: its worker or host died)"
    )
    assert rules.unstarted_reason("prose", 7.4) == (
        "prose: taken by a worker that stopped before starting it (held 7 s without a heartbeat)"
    )
    assert rules.never_taken_reason("code", 3.0) == (
        "code: never started (no worker took it within the night's window of 3 s)"
    )


def test_the_distributed_night_imports_no_prefect_until_it_talks_to_it() -> None:
    """Prefect's client costs 0.44 s to import; every local night imports this package."""
    probe = (
        "import sys, sparkcap.night.distributed.rules, sparkcap.night.distributed; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'prefect'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"
