"""Where the checkout is, for every test wherever its file sits."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
