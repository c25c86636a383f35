"""Validated configuration: deployments, sweep plans, probes, fleet files.

Every way into sparkcap (CLI flags, fleet files, flow parameters) is turned into these models
first, so a bad value is rejected with its location before anything is sent or written. API keys
are never part of a config: a config names the environment variable that holds one.

Each subject is a module of its own, imported by name:

- ``config.base``: the strict base model, token and timeout bounds, workload and profile names
- ``config.deployment``: a deployment and its endpoint, headers, credentials and timeouts
- ``config.plan``: a sweep's plan (grid or search) and a sweep request
- ``config.probes``: each probe's options, and a replay's
- ``config.command_line``: the command line's flags parsed into the above
- ``config.fleet``: a fleet file (deployments, workloads, probes, links, schedule)
- ``config.facts``, ``config.power``, ``config.sessions``: a deployment's declared facts, its
  power source, an agent session's shape
"""
