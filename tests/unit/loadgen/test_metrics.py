"""Prometheus text is parsed by the maintained client, not a regular expression."""

from __future__ import annotations

import pytest

from sparkcap.loadgen.metrics import (
    MetricsParseError,
    labels_text,
    parse_gauges,
    parse_prometheus,
)


def test_label_values_with_braces_commas_and_escaped_quotes() -> None:
    text = (
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter\n"
        'vllm:spec_decode_num_draft_tokens_total{model_name="glm}4, air",q="a\\"b"} 42\n'
        "llamacpp:tokens_predicted_total 7\n"
    )
    samples = parse_prometheus(text)
    assert samples == [
        ("vllm:spec_decode_num_draft_tokens_total", {"model_name": "glm}4, air", "q": 'a"b'}, 42.0),
        ("llamacpp:tokens_predicted_total", {}, 7.0),
    ]
    assert labels_text(samples[0][1]) == '{"model_name":"glm}4, air","q":"a\\"b"}'
    assert labels_text({}) == ""


def test_a_body_that_is_not_prometheus_text_is_an_error_not_silence() -> None:
    with pytest.raises(MetricsParseError):
        parse_prometheus("<html><body>login required</body></html>\n")


def test_a_scrape_during_a_wave_keeps_the_gauges_only() -> None:
    text = (
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{model_name="glm"} 3\n'
        "# TYPE vllm:generation_tokens_total counter\n"
        'vllm:generation_tokens_total{model_name="glm"} 900\n'
        "# TYPE vllm:request_queue_time_seconds histogram\n"
        'vllm:request_queue_time_seconds_bucket{le="+Inf"} 2\n'
        "vllm:request_queue_time_seconds_sum 1.5\n"
        "vllm:request_queue_time_seconds_count 2\n"
    )
    assert parse_gauges(text) == [("vllm:num_requests_waiting", {"model_name": "glm"}, 3.0)]
    assert len(parse_prometheus(text)) == 5
