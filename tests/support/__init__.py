"""Helpers every kind of test shares, one module per job: the CLI (``cli``), warehouse
queries (``queries``), fleet files (``fleets``), hand-made waves (``waves``), the simulator's
quick engine and sweeps against it (``sims``), the relaxed timing rule (``timing``), servers a
test starts (``servers``), ``sparkcap probe``'s flags (``probes``), hand-made mart tables
(``marts``), the marts' typed rows for the wording tests (``rows``), and the pytest plugin that
schedules the suite (``scheduling``)."""
