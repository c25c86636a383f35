"""The raw schema is written once (``sparkcap.schema``): the README's contract and dbt's
sources must name the same tables and columns, and staging's Arrow tables take its types."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
import yaml

from sparkcap.schema import RAW_TABLES, SCHEMA_SQL, raw_table

ROOT = Path(__file__).resolve().parents[2]


def _readme_contract() -> dict[str, set[str]]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## The raw warehouse") :]
    section = section[: section.index("\n## ", 5)]
    out: dict[str, set[str]] = {}
    for line in section.splitlines():
        m = re.match(r"\| `raw\.(\w+)` \|[^|]*\|(.*)\|\s*$", line)
        if m:
            words = {w for code in re.findall(r"`([^`]*)`", m[2]) for w in re.split(r"[ ,]+", code)}
            out[m[1]] = words
    return out


def test_readme_contract_lists_every_table_and_column() -> None:
    contract = _readme_contract()
    assert set(contract) == set(RAW_TABLES)
    for table, schema in RAW_TABLES.items():
        missing = set(schema.names) - contract[table]
        assert not missing, f"README's raw.{table} row lacks {sorted(missing)}"


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
