"""What becomes of a child of a distributed night, decided from what the parent can see of it:
the state Prefect reports for its flow run, the age of its heartbeat in the lake, the night's
clock. Pure (no Prefect client, no lake, no clock read) so every rule is checked as a table
(``tests/unit/night/test_distributed_rules.py``), not against a live server whose timing a busy
machine stretches.

Prefect's word is final where it has one: a completed, failed, cancelled or crashed flow run
ends the wait, including a crash Prefect marked itself (a worker marks a run crashed when the
run's process exits non-zero). Prefect 3.9 marks nothing crashed when a whole client host dies:
its flow-run heartbeat events (``PREFECT_FLOWS_HEARTBEAT_FREQUENCY``, 30 s at least) mark a
run crashed only through an automation created on the server, which a night cannot assume. So
the lake heartbeat decides that a child is lost; it is also all ``--finish`` has, with no
Prefect server at all.

States are Prefect's ``StateType`` values as strings: importing Prefect's enum would load its
client (0.5 s) into every night, distributed or not.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

# Prefect's StateType values, and those it treats as final (prefect.client.schemas.objects
# TERMINAL_STATES); the unit test holds these to the installed Prefect
FINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "CRASHED"})
STATES = FINAL_STATES | {"SCHEDULED", "PENDING", "RUNNING", "PAUSED", "CANCELLING"}
# a worker holds the run: from here on, a child that has never beaten is silent
TAKEN_STATES = frozenset({"PENDING", "RUNNING"})


class Verdict(StrEnum):
    """What the parent does about a child at one look."""

    WAIT = "wait"  # nothing to decide yet
    ENDED = "ended"  # Prefect says its flow run is final: stop watching, read its account
    LOST = "lost"  # running, beat, then silent: its worker or host died; crashed, named
    GIVE_BACK = "give back"  # taken, never beat: its worker died; marked crashed, run again
    UNSTARTED = "unstarted"  # the same, but given back already: marked crashed, named
    NEVER_TAKEN = "never taken"  # no worker took it within the window: marked cancelled, named


def silence_clock(
    state: str | None, heartbeat_age_s: float | None, silent_since_s: float | None, now_s: float
) -> float | None:
    """When the parent started counting a child's silence before its first heartbeat: at the
    first look that finds a worker holding it (pending or running). A run still waiting for a
    worker is not silent (the window judges it): counted from the first look whatever the
    state, a child that waited scheduled for ``stall_s`` was given back or named lost the
    moment a worker took it, and still ran, measured twice (seen in the loopback night)."""
    if silent_since_s is None and heartbeat_age_s is None and state in TAKEN_STATES:
        return now_s
    return silent_since_s


def silence_s(heartbeat_age_s: float | None, silent_since_s: float | None, now_s: float) -> float:
    """How long the child has said nothing: since its last heartbeat, or, never having beaten,
    since ``silence_clock`` started (a child that dies before its first beat is as silent as
    one that stops beating)."""
    if heartbeat_age_s is not None:
        return heartbeat_age_s
    return 0.0 if silent_since_s is None else now_s - silent_since_s


def child_verdict(
    state: str | None,
    heartbeat_age_s: float | None,
    *,
    silent_since_s: float | None,
    now_s: float,
    deadline_s: float,
    stall_s: float,
    start_s: float,
    may_give_back: bool,
) -> Verdict:
    """The parent's one decision about a child it is waiting for.

    ``state``: its flow run's StateType value (None before Prefect reports one);
    ``heartbeat_age_s``: None if it never beat; ``silent_since_s`` (``silence_clock``; None
    while no worker has held it), ``now_s``, ``deadline_s`` (the window's end): the parent's
    monotonic clock; ``may_give_back``: the parent can submit it again and has not yet.

    Silence is only judged past ``stall_s`` (equal is not yet), and before the first beat
    past ``start_s``: a worker's new process imports Prefect and sparkcap and runs its pull
    steps before the child's code beats, which can take longer than a 20 s stall on a loaded
    2-core machine. A child that has beaten is never resubmitted, lost
    or not: what it landed is kept, and a sweep half measured twice would be two measurements.
    One that never beat, pending or running, is given up (GIVE_BACK, UNSTARTED): Prefect marks
    a run running before the child's own code starts, and a host killed in that gap leaves a
    child that runs on neither host. Giving up is only safe with the stand-down the watch adds
    (``Lake.is_stood_down``): without it a child whose process was merely slow would be given
    back and measure on both hosts. The window cancels only a
    run no worker took (scheduled, late included), never one a worker holds.
    """
    if state in FINAL_STATES:
        return Verdict.ENDED
    silent_s = silence_s(heartbeat_age_s, silent_since_s, now_s)
    if state in TAKEN_STATES and heartbeat_age_s is None and silent_s > start_s:
        return Verdict.GIVE_BACK if may_give_back else Verdict.UNSTARTED
    if state == "RUNNING" and heartbeat_age_s is not None and silent_s > stall_s:
        return Verdict.LOST
    if state == "SCHEDULED" and now_s > deadline_s:
        return Verdict.NEVER_TAKEN
    return Verdict.WAIT


class Finish(StrEnum):
    """How ``--finish`` takes a child of a night whose parent stopped, from the lake alone."""

    NEVER_STARTED = "never started"  # no status: no worker ever ran it
    STILL_RUNNING = "still running"  # says running and beats: refuse to finish yet
    LOST = "lost"  # says running, silent past stall_s (or never beat)
    ENDED = "ended"  # its own account (ok / failed) says how it ended


def finish_verdict(
    status_state: str | None, heartbeat_age_s: float | None, stall_s: float
) -> Finish:
    """``status_state``: the ``state`` of the child's status file (None: no file). A fresh
    heartbeat refuses the finish: staging now would keep half the child's sweep."""
    if status_state is None:
        return Finish.NEVER_STARTED
    if status_state == "running":
        if heartbeat_age_s is not None and heartbeat_age_s <= stall_s:
            return Finish.STILL_RUNNING
        return Finish.LOST
    return Finish.ENDED


def child_account(
    workload: str,
    named_reason: str | None,
    status_state: str | None,
    status_reason: str | None,
    state: str,
    message: str,
) -> tuple[Literal["ok", "failed"], str | None]:
    """How a child ended, once nothing more is waited for: ok or failed, and why.

    A reason the parent already named (lost, never started) stands; otherwise the child's own
    account in the lake; otherwise Prefect's final state and message (a crash Prefect marked,
    a run cancelled by hand). A completed run that left no status is a failure: its waves
    cannot be told from a sweep cut short.
    """
    if named_reason is not None:
        return "failed", named_reason
    if status_state == "ok":
        return "ok", None
    if status_state == "failed":
        return "failed", f"{workload}: {status_reason or 'failed'}"
    if state == "COMPLETED":
        return "failed", f"{workload}: finished without a status in the lake"
    return "failed", f"{workload}: child flow run {state.lower()}" + (
        f": {message}" if message else ""
    )


def lost_reason(workload: str, silent: str, host: str) -> str:
    """``silent``: how long, worded (``21 s``, or ``ever`` for a child that never beat)."""
    return (
        f"{workload}: lost (no heartbeat for {silent} from client host {host}: its worker or "
        "host died)"
    )


def unstarted_reason(workload: str, silent_s: float) -> str:
    return (
        f"{workload}: taken by a worker that stopped before starting it (held {silent_s:.0f} s "
        "without a heartbeat)"
    )


def never_taken_reason(workload: str, window_s: float) -> str:
    return (
        f"{workload}: never started (no worker took it within the night's window of "
        f"{window_s:.0f} s)"
    )


def never_started_reason(workload: str, lake: str) -> str:
    return f"{workload}: never started (no status in the lake {lake})"
