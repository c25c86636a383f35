"""Load generation: HTTP, SSE and synchronized waves. Imports nothing from the warehouse."""
