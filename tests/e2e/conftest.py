"""One live ``prefect server`` for the whole end-to-end session, not one per module: a server
is slow to start on a busy machine. Tests share its database, so a test that creates named
things (work pools, deployments) gives them names of its own instead of asking for a fresh
server."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import ROOT
from tests.support.servers import free_port, stop_process_group, wait_for_prefect_api


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The API URL (``http://127.0.0.1:<port>/api``) of a server in its own PREFECT_HOME,
    stopped when the session ends."""
    base = tmp_path_factory.mktemp("prefect-server")
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {
        **os.environ,
        "PREFECT_HOME": str(base / "home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        # the scheduled-run test's deployment is planned within seconds, not the default 60
        "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2",
    }
    for inherited in ("PREFECT_API_URL", "PREFECT_API_KEY"):
        env.pop(inherited, None)
    log = base / "server.log"
    prefect = str(Path(sys.executable).parent / "prefect")
    with log.open("ab") as out:
        server = subprocess.Popen(
            [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for_prefect_api(api, log, timeout_s=180)
        yield api
    finally:
        stop_process_group(server)
