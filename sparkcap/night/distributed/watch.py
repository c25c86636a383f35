"""The parent's watch over its children: it polls their flow runs' states in Prefect and their
heartbeats in the lake, hands each look to ``rules.child_verdict`` and carries out what that
decides (marks the run in Prefect, submits it again, names it), telling each change as it
happens."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparkcap.config.fleet import Distributed
from sparkcap.night import progress
from sparkcap.night.distributed.child import ChildSpec
from sparkcap.night.distributed.rules import (
    Verdict,
    child_verdict,
    lost_reason,
    never_taken_reason,
    silence_clock,
    silence_s,
    unstarted_reason,
)
from sparkcap.store.lake import Lake


@dataclass
class ChildRun:
    spec: ChildSpec
    flow_run_id: Any
    state: str = "SCHEDULED"
    message: str = ""
    verdict: str | None = None  # ok / failed, once final
    reason: str | None = None
    resubmitted: int = 0
    # told to stand down, but it beat before the parent looked: it stands down or sweeps,
    # and how its run ends says which
    stand_down_asked: bool = False


@dataclass
class FanOut:
    children: list[ChildRun] = field(default_factory=list)


def wait_for_children(
    fan: FanOut,
    lake: Lake,
    settings: Distributed,
    resubmit: Callable[[ChildSpec], Any] | None = None,
    on_change: Callable[[ChildRun], None] | None = None,
) -> None:
    """Until Prefect reports every child final or the rules have closed it: lost (running and
    silent), given back to the pool once or named (taken but never started), never taken
    (still scheduled when the window closed). Each closed child is marked in Prefect (crashed
    or cancelled, with the reason) so no one waits on it."""
    # Prefect stays imported in the function: loading it adds 0.44 s to the 0.8 s import of
    # sparkcap.night.steps, which every local (--no-prefect) night pays
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.states import Cancelled, Crashed

    deadline_s = time.monotonic() + settings.window_s
    waiting = {c.flow_run_id: c for c in fan.children}
    silent_since_s: dict[Any, float | None] = {}  # rules.silence_clock, per flow run
    with get_client(sync_client=True) as client:

        def close(child: ChildRun, state: Any, reason: str, named: bool = True) -> None:
            """Mark the child's flow run in Prefect (so no one waits on it) and stop waiting."""
            client.set_flow_run_state(child.flow_run_id, state(message=reason), force=True)
            del waiting[child.flow_run_id]
            if named:
                child.reason, child.state = reason, state.__name__.upper()
            if on_change is not None:
                on_change(child)

        def give_back(child: ChildRun) -> None:
            """Submit the child again as its next attempt, which beats in a file of its own."""
            assert resubmit is not None  # the rules give back only what can be
            spec = child.spec.model_copy(update={"attempt": child.spec.attempt + 1})
            retry = ChildRun(spec, resubmit(spec), resubmitted=1)
            fan.children[fan.children.index(child)] = retry
            waiting[retry.flow_run_id] = retry

        while waiting:
            runs = client.read_flow_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=list(waiting)))
            )
            now_s = time.monotonic()
            for fr in runs:
                child = waiting[fr.id]
                st = fr.state
                before = child.state
                child.state = st.type.value if st else "UNKNOWN"
                child.message = (st.message or "") if st else ""
                if on_change is not None and child.state != before:
                    on_change(child)
                state = st.type.value if st else None
                key, attempt = child.spec.key, child.spec.attempt
                age = lake.heartbeat_age_s(key, attempt)
                since_s = silence_clock(state, age, silent_since_s.get(fr.id), now_s)
                silent_since_s[fr.id] = since_s
                verdict = child_verdict(
                    state,
                    age,
                    silent_since_s=since_s,
                    now_s=now_s,
                    deadline_s=deadline_s,
                    stall_s=settings.stall_s,
                    start_s=settings.start_s or settings.stall_s,
                    may_give_back=resubmit is not None and child.resubmitted == 0,
                )
                wl = child.spec.workload
                silent_s = silence_s(age, since_s, now_s)
                if verdict is Verdict.ENDED:
                    del waiting[fr.id]
                    if child.stand_down_asked and lake.read_status(key) is None:
                        # it stood down: nothing of it was measured
                        if resubmit is not None and child.resubmitted == 0:
                            give_back(child)
                        else:
                            child.reason = unstarted_reason(wl, silent_s)
                elif verdict is Verdict.LOST:
                    host = (lake.read_status(key) or {}).get("host", "?")
                    close(child, Crashed, lost_reason(wl, f"{silent_s:.0f} s", host))
                elif verdict in (Verdict.GIVE_BACK, Verdict.UNSTARTED):
                    # stand-down first, beat second (Lake.is_stood_down): a beat now means
                    # the child may have passed its check, so it is waited for, not rerun
                    lake.stand_down(key, attempt)
                    if lake.heartbeat_age_s(key, attempt) is not None:
                        child.stand_down_asked = True
                    elif verdict is Verdict.UNSTARTED:
                        close(child, Crashed, unstarted_reason(wl, silent_s))
                    else:
                        close(child, Crashed, unstarted_reason(wl, silent_s), named=False)
                        give_back(child)
                elif verdict is Verdict.NEVER_TAKEN:
                    close(child, Cancelled, never_taken_reason(wl, settings.window_s))
            if waiting:
                time.sleep(settings.poll_s)


def say_child(child: ChildRun, lake: Lake) -> None:
    """A child's change of state, to the run log and to a CLI watching the night."""
    from prefect.logging import get_run_logger  # lazy: see wait_for_children

    status = lake.read_status(child.spec.key) or {}
    where = f" on {status['host']}" if status.get("host") else ""
    text = f"{child.spec.deployment}/{child.spec.workload}: {child.state.lower()}{where}" + (
        f" ({child.reason})" if child.reason else ""
    )
    progress.note(text)
    with contextlib.suppress(Exception):  # outside a flow run there is no run logger
        get_run_logger().info(text)
