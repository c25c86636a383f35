"""The sparkcap CLI as a test runs it: in this process (:func:`cli_in_process`, the default)
or in a child process (:func:`run_cli`, for what only a process shows); a sweep's command line
begins with :func:`sweep_args`."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from contextlib import redirect_stderr, redirect_stdout
from subprocess import CompletedProcess


def sweep_args(endpoint: str, model: str = "m", workload: str = "code") -> list[str]:
    """``sweep --endpoint ENDPOINT --model MODEL --workload WORKLOAD``: the words every sweep's
    command line starts with; a test adds its own options after them."""
    return ["sweep", "--endpoint", endpoint, "--model", model, "--workload", workload]


def run_cli(
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
) -> CompletedProcess[str]:
    """``python -m sparkcap.cli ARGS`` in a child process, output captured as text: for what
    only a process shows (its exit status as the shell sees it, argv and environment parsing
    from scratch, signals, a terminal, what a killed one leaves). A test about what a command
    does takes :func:`cli_in_process`. ``env`` is the child's whole environment (default:
    this process's)."""
    return subprocess.run(
        [sys.executable, "-m", "sparkcap.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(env) if env is not None else dict(os.environ),
    )


def cli_in_process(
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
) -> CompletedProcess[str]:
    """``sparkcap ARGS`` in this process (``cli.main``), with ``env`` as the whole environment
    while it runs (default: this process's, untouched), its output captured as text and its
    exit status as a child's would be.

    Why: a child process pays ~7 s of CPU importing dbt, Great Expectations and Prefect and
    parsing the dbt project again; a pytest worker has them already. The command is the same
    code a person runs, from the parsing of its arguments on; what only a process shows keeps
    :func:`run_cli`. An exception the command does not turn into an error line is raised
    here, where a child would have printed its traceback and exited 1; so is
    ``TimeoutError`` from a command still running after ``timeout`` seconds (the child's
    ``TimeoutExpired``), where the test runs in the main thread, as pytest runs it."""
    from sparkcap import cli

    def too_long(*_: object) -> None:
        raise TimeoutError(f"sparkcap {' '.join(args)} still running after {timeout:g} s")

    timed = threading.current_thread() is threading.main_thread()
    saved = dict(os.environ)
    out, err = io.StringIO(), io.StringIO()
    code: int = 0
    previous = signal.signal(signal.SIGALRM, too_long) if timed else None
    try:
        if timed:
            signal.setitimer(signal.ITIMER_REAL, timeout)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        with redirect_stdout(out), redirect_stderr(err):
            try:
                cli.main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        if timed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        os.environ.clear()
        os.environ.update(saved)
    return CompletedProcess(["sparkcap", *args], code, out.getvalue(), err.getvalue())
