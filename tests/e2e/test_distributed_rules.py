"""How the parent of a distributed night tells what became of each child, against a real
Prefect API (the session's server, ``prefect_api``): lost, taken-but-never-started (back to the
pool once), never taken (cancelled at the window's end), finished. The rules themselves are a
table in tests/unit/night/test_distributed_rules.py; this is the proof that the parent reads
Prefect's states and marks its flow runs as those rules say."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkcap.config.fleet import Distributed
from sparkcap.night.distributed.child import ChildSpec
from sparkcap.night.distributed.watch import ChildRun, FanOut, wait_for_children
from sparkcap.store.lake import Lake

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def harness(prefect_api: str) -> Iterator[None]:
    """This process's Prefect client talks to the session's server."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: prefect_api}):
        yield


def _run(state: Any) -> Any:
    from prefect import flow
    from prefect.client.orchestration import get_client

    @flow(name="stand-in-child")
    def child() -> None:  # never run: only its flow runs' states matter
        pass

    with get_client(sync_client=True) as client:
        return client.create_flow_run(child, state=state).id


def _state(flow_run_id: Any) -> tuple[str, str]:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        st = client.read_flow_run(flow_run_id).state
    assert st is not None
    return st.type.value, st.message or ""


def test_the_parent_names_lost_children_and_gives_unstarted_ones_back(
    harness: None, tmp_path: Path
) -> None:
    from prefect.states import Completed, Pending, Running, Scheduled

    lake = Lake(tmp_path / "lake")

    def spec(dep: str) -> ChildSpec:
        return ChildSpec(
            fleet_path="f.yaml", deployment=dep, workload="code", run_id="r1",
            night="2026-11-30", lake=str(tmp_path / "lake"),
        )  # fmt: skip

    lost, unstarted, untaken, done = (spec(d) for d in ("lost", "unstarted", "untaken", "done"))
    # the lost child beat once, 100 s ago, from host-a
    lake.write_status(lost.key, state="running", host="host-a")
    lake.heartbeat(lost.key)
    beat = next((tmp_path / "lake").rglob("child-code.heartbeat"))
    beat.write_text(str(time.time() - 100))
    fan = FanOut(
        [
            ChildRun(lost, _run(Running())),
            ChildRun(unstarted, _run(Pending())),
            ChildRun(untaken, _run(Scheduled())),
            ChildRun(done, _run(Completed())),
        ]
    )
    first_ids = [c.flow_run_id for c in fan.children]
    resubmitted: list[str] = []

    def resubmit(s: ChildSpec) -> Any:
        resubmitted.append(s.deployment)
        assert s.attempt == 2  # beats in a file of its own
        return _run(Completed())  # another worker took it and finished

    settings = Distributed(stall_s=5, window_s=3, poll_s=0.2)
    t0 = time.monotonic()
    seen: list[tuple[str, str]] = []
    wait_for_children(
        fan, lake, settings, resubmit, lambda c: seen.append((c.spec.deployment, c.state))
    )
    assert time.monotonic() - t0 < 30
    by_dep = {c.spec.deployment: c for c in fan.children}
    assert "lost (no heartbeat for 10" in (by_dep["lost"].reason or "")
    assert "client host host-a" in (by_dep["lost"].reason or "")
    assert _state(first_ids[0]) == ("CRASHED", by_dep["lost"].reason)
    # given back once, and finished elsewhere: no reason to name it
    assert resubmitted == ["unstarted"]
    assert by_dep["unstarted"].resubmitted == 1 and by_dep["unstarted"].reason is None
    assert by_dep["unstarted"].state == "COMPLETED"
    state, message = _state(first_ids[1])
    assert state == "CRASHED" and "stopped before starting it" in message
    # told to stand down before it was given back: were it only slow, it sends nothing
    assert lake.is_stood_down(unstarted.key, 1) and not lake.is_stood_down(unstarted.key, 2)
    assert not lake.is_stood_down(lost.key, 1)  # it beat: never given back
    # the window closed on the one nobody took
    assert "never started" in (by_dep["untaken"].reason or "")
    assert _state(first_ids[2])[0] == "CANCELLED"
    assert by_dep["done"].reason is None and by_dep["done"].state == "COMPLETED"
    # every change was told as it happened
    assert {("lost", "CRASHED"), ("untaken", "CANCELLED"), ("done", "COMPLETED")} <= set(seen)
    assert ("unstarted", "COMPLETED") in seen


def test_a_second_unstarted_loss_is_named_not_resubmitted_again(
    harness: None, tmp_path: Path
) -> None:
    from prefect.states import Pending

    lake = Lake(tmp_path / "lake")
    spec = ChildSpec(
        fleet_path="f.yaml", deployment="d", workload="prose", run_id="r2",
        night="2026-11-30", lake=str(tmp_path / "lake"),
    )  # fmt: skip
    fan = FanOut([ChildRun(spec, _run(Pending()), resubmitted=1)])
    calls: list[ChildSpec] = []
    wait_for_children(fan, lake, Distributed(stall_s=5, poll_s=0.2), calls.append)
    assert calls == []
    assert "prose: taken by a worker that stopped before starting it" in (
        fan.children[0].reason or ""
    )


def test_a_child_that_beats_as_it_is_given_up_is_waited_for_then_given_back(
    harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the stand-down closes: the child's first beat lands between the parent's look
    (no beat) and its stand-down. The parent then cannot know whether the child saw it, so it
    waits: a child that stood down ends without a status and only then goes back to the pool;
    one that did not would sweep as any other child."""
    from prefect.client.orchestration import get_client
    from prefect.states import Completed, Pending

    lake = Lake(tmp_path / "lake")
    spec = ChildSpec(
        fleet_path="f.yaml", deployment="d", workload="code", run_id="r3",
        night="2026-11-30", lake=str(tmp_path / "lake"),
    )  # fmt: skip
    first = _run(Pending())
    stand_down = Lake.stand_down

    def beaten_meanwhile(self: Lake, key: Any, attempt: int) -> None:
        stand_down(self, key, attempt)
        self.heartbeat(key, attempt)  # the child's first beat, just before the parent reads
        assert self.is_stood_down(key, attempt)  # what the child then reads: it stands down
        with get_client(sync_client=True) as client:  # and its flow run ends, measuring nothing
            client.set_flow_run_state(first, Completed(), force=True)

    monkeypatch.setattr(Lake, "stand_down", beaten_meanwhile)
    resubmitted: list[ChildSpec] = []

    def resubmit(s: ChildSpec) -> Any:
        resubmitted.append(s)
        return _run(Completed())

    fan = FanOut([ChildRun(spec, first)])
    wait_for_children(fan, lake, Distributed(stall_s=5, poll_s=0.2), resubmit)
    assert [s.attempt for s in resubmitted] == [2]
    # the first attempt was never marked crashed: it ended on its own
    assert _state(first)[0] == "COMPLETED"
    assert fan.children[0].spec.attempt == 2 and fan.children[0].reason is None
