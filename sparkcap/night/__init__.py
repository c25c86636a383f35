"""A night: its plan, its steps, local sweeps, Prefect and distributed nights."""
