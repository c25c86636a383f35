"""What one stream's bytes become: first token, counts, count source and the verdict."""

from __future__ import annotations

import json

import pytest

from sparkcap.loadgen.client import StreamState, _InBandError, classify
from sparkcap.loadgen.records import NO_TOKENS, CountSource, RequestRecord, Status
from sparkcap.loadgen.sse import SSEParser, SSEProtocolError
from sparkcap.night.progress import live_decode_tok_s


def rec(required: int | None = 5) -> RequestRecord:
    return RequestRecord(
        "r", 0, "code-01", requested_tokens=5, required_tokens=required, temperature=0.0
    )


def sse(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunk(
    content: str | None = None,
    finish: str | None = None,
    usage: dict | None = None,
    role: bool = False,
) -> bytes:
    delta: dict[str, str] = {}
    if role:
        delta["role"] = "assistant"
        delta["content"] = ""
    if content is not None:
        delta["content"] = content
    obj: dict[str, object] = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = usage
    return sse(obj)


def usage_only(n: int, cached: int | None = None) -> bytes:
    u: dict[str, object] = {"prompt_tokens": 40, "completion_tokens": n}
    if cached is not None:
        u["prompt_tokens_details"] = {"cached_tokens": cached}
    return sse({"choices": [], "usage": u})


def run(parts: list[tuple[bytes, int]], r: RequestRecord | None = None) -> RequestRecord:
    r = r or rec()
    st = StreamState(r, 0, SSEParser())
    for data, t in parts:
        st.feed(data, t)
    st.close(parts[-1][1] if parts else 0)
    st.finalize()
    r.status = classify(r)
    return r


def test_role_chunk_is_not_first_token_and_multi_token_chunks_are_not_counted() -> None:
    r = run(
        [
            (chunk(role=True), 100),
            (chunk("abc"), 200),  # 3 tokens in one chunk (speculative decoding)
            (chunk("de"), 300),
            (chunk(finish="length"), 310),
            (usage_only(5, cached=16), 320),
            (b"data: [DONE]\n\n", 330),
        ]
    )
    assert r.first_token_ns == 200
    assert r.last_token_ns == 300
    assert r.n_chunks == 2
    assert r.completion_tokens == 5
    assert r.count_source is CountSource.USAGE
    assert list(r.chunks.n_tokens) == [NO_TOKENS, NO_TOKENS]
    assert r.cached_prompt_tokens == 16 and r.prompt_tokens == 40
    assert r.status is Status.OK and r.finish_reason == "length"


def test_continuous_usage_gives_per_chunk_counts() -> None:
    r = run(
        [
            (chunk(role=True, usage={"completion_tokens": 0}), 1),
            (chunk("abc", usage={"completion_tokens": 3}), 2),
            (chunk("de", usage={"completion_tokens": 5}), 3),
            (chunk(finish="length", usage={"completion_tokens": 5}), 4),
            (usage_only(5), 5),
            (b"data: [DONE]\n\n", 6),
        ]
    )
    assert r.count_source is CountSource.CONTINUOUS_USAGE
    assert list(r.chunks.n_tokens) == [3, 2]


def test_usage_on_last_content_chunk_only_is_not_per_chunk() -> None:
    r = run(
        [
            (chunk("abc"), 2),
            (chunk("de", finish="length", usage={"completion_tokens": 5}), 3),
            (b"data: [DONE]\n\n", 4),
        ]
    )
    assert r.count_source is CountSource.USAGE
    assert list(r.chunks.n_tokens) == [NO_TOKENS, NO_TOKENS]
    assert r.completion_tokens == 5


def test_no_usage_means_null_count_never_a_guess() -> None:
    r = run([(chunk("abc"), 2), (chunk("de", finish="length"), 3), (b"data: [DONE]\n\n", 4)])
    assert r.completion_tokens is None
    assert r.count_source is CountSource.NONE
    assert r.status is Status.OK  # ended properly; the missing length is a data-quality failure
    assert live_decode_tok_s(r) is None


def test_short_output() -> None:
    r = run(
        [(chunk("ab"), 2), (chunk(finish="stop"), 3), (usage_only(2), 4), (b"data: [DONE]\n\n", 5)]
    )
    assert r.status is Status.SHORT


def test_short_not_judged_without_required_length() -> None:
    r = run(
        [(chunk("ab"), 2), (chunk(finish="stop"), 3), (usage_only(2), 4), (b"data: [DONE]\n\n", 5)],
        rec(required=None),
    )
    assert r.status is Status.OK


def test_clean_end_without_done_or_finish_is_truncated() -> None:
    r = run([(chunk("abc"), 2), (chunk("de"), 3), (usage_only(5), 4)])
    assert r.status is Status.TRUNCATED
    assert r.n_chunks == 2  # partial data kept


def test_finish_reason_without_done_counts_as_ended() -> None:
    r = run([(chunk("abcde", finish="length"), 3), (usage_only(5), 4)])
    assert r.status is Status.OK


def test_in_band_error_object_and_event() -> None:
    st = StreamState(rec(), 0, SSEParser())
    st.feed(chunk("ab"), 1)
    with pytest.raises(_InBandError, match="engine died"):
        st.feed(sse({"error": {"message": "engine died", "code": 500}}), 2)
    st2 = StreamState(rec(), 0, SSEParser())
    with pytest.raises(_InBandError):
        st2.feed(b"event: error\ndata: boom\n\n", 1)


@pytest.mark.parametrize(
    "payload",
    [b"data: not json\n\n", b"data: [1, 2]\n\n", b"data: " + b"[" * 100_000 + b"\n\n"],
)
def test_non_json_is_protocol_error(payload: bytes) -> None:
    st = StreamState(rec(), 0, SSEParser(max_line_bytes=1 << 20))
    with pytest.raises(SSEProtocolError):
        st.feed(payload, 1)


def test_arrival_time_is_the_time_of_the_completing_read() -> None:
    data = chunk("abc")
    st = StreamState(rec(), 1000, SSEParser())
    st.feed(data[:10], 1500)
    st.feed(data[10:], 2500)
    assert st.rec.first_token_ns == 1500  # 2500 - anchor 1000


def test_anything_after_done_is_ignored() -> None:
    r = run(
        [
            (chunk("abcde", finish="length"), 1),
            (usage_only(5), 2),
            (b"data: [DONE]\n\n", 3),
            (chunk("zzz"), 4),
        ]
    )
    assert r.n_chunks == 1 and r.status is Status.OK


@pytest.mark.parametrize(
    ("usage", "why"),
    [
        ({"prompt_tokens": 40, "completion_tokens": True}, "completion_tokens true"),
        ({"prompt_tokens": 40, "completion_tokens": 2**31}, "completion_tokens 2147483648"),
        ({"prompt_tokens": 40, "completion_tokens": -1}, "completion_tokens -1"),
        ({"prompt_tokens": 2.5, "completion_tokens": 5}, "prompt_tokens 2.5"),
        (
            {
                "prompt_tokens": 4,
                "completion_tokens": 5,
                "prompt_tokens_details": {"cached_tokens": 8},
            },
            "cached_tokens 8 exceed prompt_tokens 4",
        ),
    ],
)
def test_a_count_that_cannot_be_true_discards_the_streams_usage(
    usage: dict[str, object], why: str
) -> None:
    """Judged as a stream without a count: ``ok`` (never ``short`` by an absurd count), every
    count NULL, ``invalid_usage`` and the reason."""
    r = run(
        [
            (chunk("abc"), 2),
            (chunk("de", finish="length"), 3),
            (sse({"choices": [], "usage": usage}), 4),
            (b"data: [DONE]\n\n", 5),
        ]
    )
    assert (r.completion_tokens, r.prompt_tokens, r.cached_prompt_tokens) == (None, None, None)
    assert r.count_source is CountSource.INVALID_USAGE
    assert r.status is Status.OK and why in (r.error or "")


def test_continuous_counts_that_go_down_are_not_stored_as_negatives() -> None:
    r = run(
        [
            (chunk("abc", usage={"completion_tokens": 3}), 2),
            (chunk("de", usage={"completion_tokens": 1}), 3),
            (chunk("f", finish="length", usage={"completion_tokens": 6}), 4),
            (b"data: [DONE]\n\n", 5),
        ]
    )
    assert list(r.chunks.n_tokens) == [NO_TOKENS, NO_TOKENS, NO_TOKENS]
    assert r.completion_tokens is None and r.count_source is CountSource.INVALID_USAGE
    assert "went down from 3 to 1" in (r.error or "")


def delta_chunk(delta: dict[str, object], usage: dict[str, object] | None = None) -> bytes:
    obj: dict[str, object] = {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    if usage is not None:
        obj["usage"] = usage
    return sse(obj)


@pytest.mark.parametrize(
    "reasoning",
    [
        {"reasoning_content": "Let me think."},  # vLLM before 2025, llama-server, SGLang
        {"reasoning": "Let me think."},  # vLLM since 2025
        {"reasoning_details": [{"type": "reasoning.text", "text": "Let me think."}]},
    ],
    ids=["reasoning_content", "reasoning", "reasoning_details"],
)
def test_reasoning_is_the_first_token_and_the_answer_is_timed_apart(
    reasoning: dict[str, object],
) -> None:
    """A thinking model's stream: TTFT is its first token on any channel, the reasoning's;
    the first answer token (content) is stamped beside it; usage's reasoning tokens kept."""
    r = run(
        [
            (delta_chunk(reasoning), 100),
            (chunk("def f"), 300),
            (chunk("():", finish="stop"), 400),
            (
                sse(
                    {
                        "choices": [],
                        "usage": {
                            "prompt_tokens": 9,
                            "completion_tokens": 5,
                            "completion_tokens_details": {"reasoning_tokens": 3},
                        },
                    }
                ),
                410,
            ),
            (b"data: [DONE]\n\n", 420),
        ]
    )
    assert (r.first_token_ns, r.first_answer_ns, r.last_token_ns) == (100, 300, 400)
    assert r.reasoning_chars == len("Let me think.") and r.reasoning_tokens == 3
    assert r.completion_tokens == 5 and r.status == Status.OK and not r.think_tag


def test_hidden_reasoning_and_a_think_tag_are_both_seen() -> None:
    """Usage counting reasoning tokens with none streamed (reasoning hidden), and reasoning
    sent inside the answer's text as <think>: each is recorded, neither guessed away."""
    hidden = run(
        [
            (chunk("Answer", finish="stop"), 200),
            (usage_only(7), 210),
            (
                sse(
                    {
                        "choices": [],
                        "usage": {
                            "completion_tokens": 7,
                            "completion_tokens_details": {"reasoning_tokens": 6},
                        },
                    }
                ),
                211,
            ),
            (b"data: [DONE]\n\n", 220),
        ],
        rec(None),
    )
    assert hidden.reasoning_tokens == 6 and hidden.reasoning_chars == 0
    assert hidden.first_answer_ns == hidden.first_token_ns == 200
    tagged = run([(chunk("<think>hmm</think>x", finish="stop"), 50), (b"data: [DONE]\n\n", 60)])
    assert tagged.think_tag and tagged.first_answer_ns == 50


@pytest.mark.parametrize(
    ("details", "words"),
    [
        ({"reasoning_tokens": 2**31}, "reasoning_tokens 2147483648 is not a token count"),
        ({"reasoning_tokens": True}, "reasoning_tokens true is not a token count"),
        ({"reasoning_tokens": 9}, "reasoning_tokens 9 exceed completion_tokens 5"),
        ("many", 'completion_tokens_details is "many", not an object'),
    ],
)
def test_an_impossible_reasoning_count_discards_the_streams_usage_with_the_reason(
    details: object, words: str
) -> None:
    r = run(
        [
            (chunk("abc", finish="stop"), 10),
            (
                sse(
                    {
                        "choices": [],
                        "usage": {"completion_tokens": 5, "completion_tokens_details": details},
                    }
                ),
                20,
            ),
            (b"data: [DONE]\n\n", 30),
        ],
        rec(None),
    )
    assert r.reasoning_tokens is None and r.completion_tokens is None
    assert r.count_source == CountSource.INVALID_USAGE and words in (r.error or ""), r.error
