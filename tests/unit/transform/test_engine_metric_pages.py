"""The diagnosis's name map and the simulator's engine styles, against real engines' pages.

``int_engine_metric_names`` says which ``/metrics`` name means what for each engine. Each page
under ``tests/data/metrics_pages`` is one a real engine prints (SOURCES.md says where each came
from). Each page goes through the scrape's own parsing (``parse_prometheus``, and
``parse_gauges`` for what a sample taken during a wave keeps). For every meaning the map claims,
the name must be on the page with the type its kind needs: a gauge meaning needs a gauge
family, or the during-wave samples never hold it. A counter meaning needs a counter's
``_total`` sample or a histogram's ``_sum`` / ``_count``. A meaning the map gives an engine no
name for must be one this test lists as absent for that engine. The model is plain SQL, run
here by DuckDB as dbt would, without a dbt build.
"""

from __future__ import annotations

from typing import cast

import duckdb
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkcap.loadgen.metrics import parse_gauges, parse_prometheus
from sparkcap.servers.llama import LLAMA_CPP_PYTHON_SHA256, LLAMA_CPP_PYTHON_VERSION
from sparkcap.servers.sim.metrics_pages import ENGINE_METRICS
from sparkcap.servers.sim.profile import MetricStyle
from tests.paths import ROOT

PAGES_DIR = ROOT / "tests" / "data" / "metrics_pages"
MAP_SQL = ROOT / "dbt" / "models" / "intermediate" / "diagnosis" / "int_engine_metric_names.sql"

# page → (engine, meanings the map claims for that engine that this older version lacks)
PAGES: dict[str, tuple[str, frozenset[str]]] = {
    "vllm-005a810.prom": ("vllm", frozenset()),
    "sglang-00ae9c1.prom": ("sglang", frozenset()),
    # SGLang's own docs sample, from before its retraction, queue-time and speculative families
    "sglang-docs-sample.prom": (
        "sglang",
        frozenset({"preemptions", "queue_time_s_sum", "queue_time_count", "accept_length"}),
    ),
    "llamacpp-b1-0c1e570.prom": ("llamacpp", frozenset()),
    "tgi-3.3.7.prom": ("tgi", frozenset()),
}
# the newest recorded page of each engine: the simulator's style must match it
NEWEST = {
    "vllm": "vllm-005a810.prom",
    "sglang": "sglang-00ae9c1.prom",
    "llamacpp": "llamacpp-b1-0c1e570.prom",
    "tgi": "tgi-3.3.7.prom",
}
# meanings each engine publishes no name for at the recorded versions (the map has none)
ABSENT: dict[str, frozenset[str]] = {
    "vllm": frozenset({"accept_length", "decode_steps"}),
    "sglang": frozenset({"draft_tokens", "accepted_tokens", "decode_steps"}),
    "llamacpp": frozenset(
        {"kv_cache_usage", "preemptions", "accept_length", "queue_time_s_sum", "queue_time_count"}
    ),
    "tgi": frozenset(
        {
            "kv_cache_usage",
            "preemptions",
            "draft_tokens",
            "accepted_tokens",
            "accept_length",
            "decode_steps",
        }
    ),
}


def _map() -> list[tuple[str, str, str, str, int]]:
    sql = MAP_SQL.read_text()
    assert "{{" not in sql and "{%" not in sql, "the map is plain SQL; this test runs it as such"
    with duckdb.connect() as con:
        rows = con.execute(
            f"select engine, evidence, kind, metric_name, preference from ({sql})"
        ).fetchall()
    return [(str(a), str(b), str(c), str(d), int(e)) for a, b, c, d, e in rows]


MAP = _map()
MEANINGS = frozenset(evidence for _, evidence, _, _, _ in MAP)


def _claims(engine: str) -> dict[str, list[tuple[str, str]]]:
    """Meaning → [(kind, name)] in preference order."""
    out: dict[str, list[tuple[str, str, int]]] = {}
    for eng, evidence, kind, name, pref in MAP:
        if eng == engine:
            out.setdefault(evidence, []).append((kind, name, pref))
    return {m: [(k, n) for k, n, _ in sorted(v, key=lambda r: r[2])] for m, v in out.items()}


def _roles(text: str) -> dict[str, str]:
    """Each sample name on the page → what it is: gauge, counter (a ``_total``), or a
    histogram's / summary's sum or count."""
    roles: dict[str, str] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if fam.type == "gauge":
                roles[s.name] = "gauge"
            elif fam.type == "counter" and s.name.endswith("_total"):
                roles[s.name] = "counter"
            elif fam.type in ("histogram", "summary") and s.name == f"{fam.name}_sum":
                roles[s.name] = "sum"
            elif fam.type in ("histogram", "summary") and s.name == f"{fam.name}_count":
                roles[s.name] = "count"
    return roles


def _page(name: str) -> str:
    return (PAGES_DIR / name).read_text()


def _fits(meaning: str, kind: str, role: str | None) -> bool:
    if kind == "gauge":
        return role == "gauge"
    if meaning.endswith("_sum"):
        return role == "sum"
    if meaning.endswith("_count"):
        return role == "count"
    return role in ("counter", "sum", "count")


def test_every_engine_meaning_is_mapped_or_listed_absent() -> None:
    names = [name for _, _, _, name, _ in MAP]
    assert len(names) == len(set(names))  # the model's own unique test, here too
    for engine, absent in ABSENT.items():
        claimed = set(_claims(engine))
        assert claimed.isdisjoint(absent), (engine, claimed & absent)
        assert claimed | absent == MEANINGS, (engine, MEANINGS - claimed - absent)


@pytest.mark.parametrize("page", list(PAGES))
def test_the_map_reads_each_real_page(page: str) -> None:
    engine, lacking = PAGES[page]
    text = _page(page)
    samples = {name for name, _, _ in parse_prometheus(text)}  # the before/after scrape
    during = {name for name, _, _ in parse_gauges(text)}  # what a sample during a wave keeps
    roles = _roles(text)
    for meaning, names in _claims(engine).items():
        on_page = [(kind, name) for kind, name in names if name in samples]
        if meaning in lacking:
            assert not on_page, f"{page}: {meaning} is listed absent but {on_page} is there"
            continue
        assert on_page, f"{page}: no name for {meaning} ({[n for _, n in names]})"
        for kind, name in on_page:
            role = roles.get(name)
            assert _fits(meaning, kind, role), (page, meaning, kind, name, role)
            if kind == "gauge":
                assert name in during, (page, name)
        # the first-preferred name is the one the engine prints now
        assert names[0] in on_page, (page, meaning, names[0])


def test_every_mapped_name_is_on_a_recorded_page_of_its_engine() -> None:
    for engine in NEWEST:
        pages = [p for p, (eng, _) in PAGES.items() if eng == engine]
        printed = {name for p in pages for name, _, _ in parse_prometheus(_page(p))}
        for meaning, names in _claims(engine).items():
            for _, name in names:
                assert name in printed, (engine, meaning, name)


def _families(text: str) -> dict[str, str]:
    """Family name as the simulator names it (counters with ``_total``) → type."""
    return {
        (f"{fam.name}_total" if fam.type == "counter" else fam.name): fam.type
        for fam in text_string_to_metric_families(text)
    }


@pytest.mark.parametrize("engine", list(NEWEST))
def test_the_simulators_style_shows_only_what_the_real_engine_prints(engine: str) -> None:
    real = _families(_page(NEWEST[engine]))
    style = {name: kind for name, kind, _, _ in ENGINE_METRICS[cast(MetricStyle, engine)]}
    assert {n: real.get(n) for n in style} == style
    # and every name the map reads for the engine, the style shows (so the simulator tests it)
    shown = set(style) | {f"{n}_sum" for n, k in style.items() if k == "histogram"}
    shown |= {f"{n}_count" for n, k in style.items() if k == "histogram"}
    mapped = {name for names in _claims(engine).values() for _, name in names}
    legacy = {"vllm:gpu_cache_usage_perc"}  # the deprecated name, kept for older vLLM
    assert mapped - legacy <= shown, mapped - legacy - shown


def test_the_llama_cpp_page_is_of_the_build_sparkcap_pins() -> None:
    header = _page(NEWEST["llamacpp"])
    assert f"llama-cpp-python {LLAMA_CPP_PYTHON_VERSION}" in header
    assert LLAMA_CPP_PYTHON_SHA256[:8] in header
