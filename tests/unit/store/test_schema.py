"""The raw schema is written once (``sparkcap.store.schema``): the contract for ad-hoc SQL
(docs/reference/raw-schema.md, generated from it) and dbt's sources must name the same tables
and columns, and staging's Arrow tables take its types."""

from __future__ import annotations

import re

import duckdb
import pyarrow as pa
import pytest
import yaml

from sparkcap.docs_reference import raw_schema_page
from sparkcap.store.schema import RAW_TABLES, SCHEMA_SQL, raw_table
from tests.paths import ROOT


def test_readme_contract_lists_every_table_and_column() -> None:
    """The contract moved from the README to a page generated from ``RAW_TABLES``: it must be
    what the generator writes now, with one row for every column of every table."""
    page = (ROOT / "docs" / "reference" / "raw-schema.md").read_text(encoding="utf-8")
    assert page == raw_schema_page(), "docs/reference/raw-schema.md is stale: make docs-reference"
    for table, schema in RAW_TABLES.items():
        section = page.split(f"\n## `raw.{table}`\n", 1)[1].split("\n## ", 1)[0]
        listed = re.findall(r"^\| `(\w+)` \|", section, re.M)
        assert listed == schema.names, f"raw.{table}"


def test_dbt_sources_name_the_same_tables_and_columns() -> None:
    doc = yaml.safe_load((ROOT / "dbt" / "models" / "staging" / "_sources.yml").read_text())
    (raw,) = [s for s in doc["sources"] if s["name"] == "raw"]
    tables = {t["name"]: t for t in raw["tables"]}
    assert set(tables) == set(RAW_TABLES)
    for name, table in tables.items():
        for column in table.get("columns") or []:
            assert column["name"] in RAW_TABLES[name].names, (name, column["name"])


def test_ddl_and_arrow_agree() -> None:
    with duckdb.connect() as con:
        con.execute(SCHEMA_SQL)
        for name, schema in RAW_TABLES.items():
            described = [r[0] for r in con.execute(f"describe raw.{name}").fetchall()]
            assert described == schema.names
    table = raw_table("chunks", {"request_id": ["a"], "seq": [0], "t_ns": [5], "n_chars": [3]})
    assert table.schema.field("seq").type == pa.int32()
    assert table.schema.field("t_ns").type == pa.int64()
    with pytest.raises(KeyError, match="no column"):
        raw_table("chunks", {"sequence": [0]})
