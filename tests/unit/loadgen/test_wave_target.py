"""A wave's target carries the deployment's secrets to the requests and nowhere else: printed
(a log line, a traceback's locals), it shows neither a header value nor the URL's credentials."""

from __future__ import annotations

import pytest

from sparkcap.config.deployment import Deployment
from sparkcap.loadgen.wave import wave_target

pytestmark = pytest.mark.unit


def test_a_printed_target_holds_no_header_value_and_no_url_credentials() -> None:
    deployment = Deployment(name="d", endpoint="http://user:url-secret@127.0.0.1:9/v1", model="m")
    target = wave_target(deployment, {"Authorization": "Bearer header-secret"})
    # the URL's credentials never stay in the URL; the requests still carry the header
    assert "url-secret" not in target.url
    assert target.headers_for("r1")["Authorization"] == "Bearer header-secret"
    assert target.headers_for("r1")["X-Request-Id"] == "r1"
    for printed in (repr(target), str(target), f"{target!r}"):
        assert "header-secret" not in printed and "url-secret" not in printed, printed
    assert "WaveTarget(" in repr(target) and "total_timeout_s=" in repr(target)
