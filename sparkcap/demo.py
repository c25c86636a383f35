"""The demo profile: the twin fleet, every deployment × workload, one short trial per level."""

from __future__ import annotations

from sparkcap.config import Deployment, SweepPlan, SweepRequest
from sparkcap.sim.fleet import HARDWARE, TWIN

DEMO_LEVELS = (1, 2, 4, 8, 16)


def demo_requests(endpoint: str, max_tokens: int = 64, trials: int = 1) -> list[SweepRequest]:
    reqs = []
    for d in TWIN:
        dep = Deployment(
            name=d.name,
            endpoint=endpoint,
            model=d.model,
            nodes=d.nodes,
            replicas=d.replicas,
            hardware=HARDWARE,
            extra_body={"ignore_eos": True},
        )
        for wl in ("code", "prose"):
            reqs.append(
                SweepRequest(
                    deployment=dep,
                    workload=wl,
                    plan=SweepPlan(levels=DEMO_LEVELS, trials=trials, max_tokens=max_tokens),
                )
            )
    return reqs
