"""The child of a distributed night: one deployment × workload, swept by whichever worker of
the pool takes it, landing its waves in the lake (``sparkcap.night.distributed.child``).

Thin, like ``flows/nightly.py``: the parent is that same nightly flow with ``distributed``
set, which starts these runs with ``run_deployment(timeout=0)`` and stages the lake when all
are done. Load generation is never retried (a retried sweep is another measurement).
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger

from sparkcap.night.distributed import CHILD_FLOW, ChildSpec, sweep_child
from sparkcap.night.progress import wave_summary


def _log_progress(wave: Any, done: int, total: int) -> None:
    if wave.trial > 0:
        get_run_logger().info("%s/%s %s", wave.deployment, wave.workload, wave_summary(wave))


@flow(name=CHILD_FLOW, retries=0, log_prints=True)
def sweep_target(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec``: a ``ChildSpec`` (deployment, workload, run, lake, fleet file)."""
    child = ChildSpec.model_validate(spec)
    outcome = sweep_child(child, progress=_log_progress)
    get_run_logger().info(
        "%s/%s: %s, %d wave(s) in the lake%s",
        child.deployment,
        child.workload,
        outcome.state,
        outcome.waves,
        f" ({outcome.reason})" if outcome.reason else "",
    )
    return {"state": outcome.state, "waves": outcome.waves, "reason": outcome.reason}
