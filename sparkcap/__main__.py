"""``python -m sparkcap``: the ``sparkcap`` command, for an environment whose scripts folder is
not on PATH (or a checkout run with its venv's Python)."""

from sparkcap.cli import main

if __name__ == "__main__":
    main()
