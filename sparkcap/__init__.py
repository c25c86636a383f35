"""sparkcap: interactive-rate capacity planning for LLM serving fleets."""

__version__ = "0.6.0"
