"""A night spread over Prefect workers on many client hosts, landing in one warehouse.

One process cannot sweep a 100-deployment fleet in a night (a client process saturates at a
few hundred streams), and DuckDB takes one writer. So a distributed night is a parent and its
children, in four rooms:

- ``child``: what a child flow run does on whichever worker takes it (``flows/distributed.py``
  runs it): sweep one deployment × workload into the lake, never the warehouse, beating a
  heartbeat there, holding Prefect global concurrency limits while it sweeps:
  ``target:<deployment>`` (one sweep per target at a time), ``share:<name>`` for each link or
  node the fleet file says the deployment shares (deployments sharing one never run
  together), and ``host:<client host>`` occupying the plan's peak streams out of the host's
  stream budget;
- ``parent``: the sweep step of a ``Night`` with ``distributed``: records the run, starts one
  child flow run per deployment × workload on the work pool, waits for them all, then, as the
  only writer, stages the lake (``sparkcap.store.lake``) and records what each deployment's
  children did; the rest of the night runs once, as on one machine;
- ``watch``: the parent's wait, polling Prefect's flow-run states and the lake's heartbeats;
- ``finish``: ``sparkcap run --finish RUN_ID``, what the parent would have done after its
  wait, for a parent that died, from the children's own statuses.

Every decision about a child is one pure function in ``rules``: a child that fails says why in
its status file; one whose worker dies stops its heartbeat and is declared lost after
``stall_s`` (its flow run is marked crashed); one a worker took but never started goes back to
the pool once; one no worker takes before the window closes is cancelled. Each costs its
deployment × workload only: what it landed is staged, and the night names what is missing and
why (``raw.step_outcomes``).

This module keeps the names the command line, the night's steps and the child flow import.
"""

from sparkcap.night.distributed.child import CHILD_FLOW, ChildSpec, sweep_child
from sparkcap.night.distributed.finish import children_to_finish, finish_distributed
from sparkcap.night.distributed.parent import check_budgets, require_server, sweep_distributed

__all__ = [
    "CHILD_FLOW",
    "ChildSpec",
    "check_budgets",
    "children_to_finish",
    "finish_distributed",
    "require_server",
    "sweep_child",
    "sweep_distributed",
]
