"""A simulated serving fleet: a test double and the demo's fleet, nothing more."""
