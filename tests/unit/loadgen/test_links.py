from __future__ import annotations

import json

import pytest

from sparkcap.loadgen.links import LinkParseError, parse_ib_bw, parse_iperf3_json, parse_plain

IB = """
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      5000             11812.34            11798.21              0.188771
---------------------------------------------------------------------------------------
"""


def test_iperf3_json_receiver_rate() -> None:
    doc = {
        "end": {
            "sum_sent": {"bits_per_second": 13.1e9},
            "sum_received": {"bits_per_second": 12.8e9},
        }
    }
    assert parse_iperf3_json(json.dumps(doc)) == pytest.approx(12.8)


def test_iperf3_error_and_garbage() -> None:
    with pytest.raises(LinkParseError, match="unable to connect"):
        parse_iperf3_json(json.dumps({"error": "unable to connect to server"}))
    with pytest.raises(LinkParseError):
        parse_iperf3_json("not json")


def test_ib_bw_average_in_gbits() -> None:
    assert parse_ib_bw(IB) == pytest.approx(11798.21 * 8 / 1000)
    gb = IB.replace("[MB/sec]", "[Gb/sec]").replace("11798.21", "94.39")
    assert parse_ib_bw(gb) == pytest.approx(94.39)


def test_plain_format() -> None:
    assert parse_plain("probe ok\ngbps=12.5\n") == 12.5
    with pytest.raises(LinkParseError):
        parse_plain("12.5")
