"""The suite's scheduling, a pytest plugin (``pytest_plugins`` in ``tests/conftest.py``).

Each test carries its folder's marker; tests that share a fixture wider than one test run on
one pytest-xdist worker (``--dist loadgroup``), the groups started longest work first; and
each test's CPU seconds go to ``SPARKCAP_BUILD_LOG`` beside the builds."""

from __future__ import annotations

import json
import os
import resource
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pytest.nodeid import coerce_node_id

from tests.twin import PREBUILT_ENV


def pytest_configure(config: pytest.Config) -> None:
    """Groups start in the order ``pytest_collection_modifyitems`` sorts them, longest work
    first: pytest-xdist's own reordering (by a group's number of tests) would start the twin
    night and the llama-server's tests first, each waiting on something ``make test`` builds
    beside them."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def _cpu_s() -> tuple[float, float]:
    """(this process's CPU seconds, its reaped children's): a child's are counted when it is
    waited for, so a module fixture's server is paid by the module's last test."""
    me, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Each test's CPU seconds (setup, call and teardown, with the processes it waited for)
    in SPARKCAP_BUILD_LOG beside the builds: on 2 saturated cores the suite's time is its
    CPU, and wall durations only say who waited longest."""
    log = os.environ.get("SPARKCAP_BUILD_LOG")
    before, wall = _cpu_s(), time.perf_counter()
    yield
    if not log:
        return
    after = _cpu_s()
    note = {
        "kind": "test",
        "what": "cpu",
        "test": item.nodeid,
        "seconds": round(time.perf_counter() - wall, 3),
        "cpu_s": round(after[0] - before[0], 3),
        "children_cpu_s": round(after[1] - before[1], 3),
    }
    try:
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps(note) + "\n")
    except OSError:
        pass


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test carries its folder's marker (``-m unit``, ``-m integration``, ``-m e2e``).

    Tests that share one of our fixtures wider than a test (the twin night, a module's Prefect
    server, the llama-server) form one ``xdist_group``, joined transitively: under ``-n N
    --dist loadgroup`` they run on one worker, so each such fixture is built once, as in a
    serial run."""
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    keys_of: dict[int, list[str]] = {}
    for item in items:
        parts = Path(str(item.path)).parts
        for kind in ("unit", "integration", "e2e"):
            if kind in parts:
                item.add_marker(kind)
        keys = sorted(shared_fixtures(item))
        keys_of[id(item)] = keys
        for other in keys[1:]:
            parent[find(other)] = find(keys[0])
    group_of = {id(item): find(keys_of[id(item)][0]) for item in items if keys_of[id(item)]}
    group_size = Counter(group_of.values())
    position = {id(item): i for i, item in enumerate(items)}
    items.sort(
        key=lambda item: (
            _start_order(item),
            -group_size.get(group_of.get(id(item), ""), 1),
            position[id(item)],
        )
    )
    grouping = bool(getattr(config.option, "loadgroup", False))  # set on xdist workers
    for item in items:
        if id(item) in group_of:
            group = group_of[id(item)].replace("@", "_").replace("]", "_")
            item.add_marker(pytest.mark.xdist_group(group))
            if grouping and "@" not in item.nodeid:
                # pytest-xdist 3.8 groups by an "@group" suffix on the node id, which it sets
                # on ``item._nodeid``; pytest 9 reads ``item._id``, so the suffix is set here
                item._id = coerce_node_id(f"{item.nodeid}@{group}")


def _start_order(item: pytest.Item) -> int:
    """The order groups start in (pytest-xdist hands them out in this order, see
    ``pytest_configure``): the e2e groups (the longest: distributed nights, Prefect flows, the
    wheel), then the integration tests, larger groups first; then the tests of the twin night
    where ``make test`` builds it ahead of them (so no worker waits for it while there is other
    work; built here, it is the longest group and goes first); then those on the real
    llama-server (``make test`` runs them in a pytest of their own once its build is done);
    last the unit tests (many and short: what fills the end of a parallel run)."""
    if item.get_closest_marker("unit"):
        return 5
    if item.get_closest_marker("real_server"):
        return 4
    if "twin_night" in getattr(item, "fixturenames", ()):
        return 3 if os.environ.get(PREBUILT_ENV) else 0
    return 1 if item.get_closest_marker("e2e") else 2


def shared_fixtures(item: pytest.Item) -> set[str]:
    """This project's fixtures, wider than one test, that the item uses (and the module's
    llama-server, which each ``real_server`` module starts from one cached build)."""
    info = getattr(item, "_fixtureinfo", None)
    found: set[str] = set()
    for name, defs in info.name2fixturedefs.items() if info else ():
        for fixturedef in defs:
            if fixturedef.scope != "function" and fixturedef.baseid.startswith("tests"):
                found.add(f"{fixturedef.baseid}::{name}")
    if item.get_closest_marker("real_server"):
        # one group per module, not one for all: each module starts its own llama-server
        # (one thread) from the one cached build, so the two run side by side on two workers
        # once the build is done, instead of one after the other on one core at the end of
        # the run, with the other core idle
        found.add(f"llama-server:{Path(str(item.path)).stem}")
    return found
