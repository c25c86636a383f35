"""Processes sparkcap starts: llama-server, the simulator, and the supervisor they share."""
