"""The judgement settings dbt stores on its rows cover every var the project declares."""

from __future__ import annotations

import re

import yaml

from tests.paths import ROOT


def test_every_dbt_var_is_part_of_the_stored_judgement_settings() -> None:
    """A var missing from judgement_var_names() could change a capacity without the nights
    already built being rebuilt: history would mix settings silently."""
    vars_ = yaml.safe_load((ROOT / "dbt" / "dbt_project.yml").read_text())["vars"]
    macro = (ROOT / "dbt" / "macros" / "judgement_settings.sql").read_text()
    listed = re.search(r"return\(\[(.*?)\]\)", macro, re.S)
    assert listed is not None
    assert sorted(re.findall(r"'(\w+)'", listed.group(1))) == sorted(vars_)
