"""Fixtures of the publish tests: a warehouse file made from hand-made marts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest


@pytest.fixture
def hand_made_warehouse(tmp_path: Path) -> Callable[[str, str], Path]:
    """Makes ``tmp_path / name``, a DuckDB file holding what ``sql`` creates (the marts a
    reader test reads, laid out as dbt builds them)."""

    def make(name: str, sql: str) -> Path:
        path = tmp_path / name
        with duckdb.connect(str(path)) as con:
            con.execute(sql)
        return path

    return make
