"""What sparkcap prints, as text, one module per subject: the consoles every line goes through
(:mod:`.console`), the words for a capacity, what limits it and the fleet's (:mod:`.capacity`),
a link test's and a context ladder's answers (:mod:`.links`, :mod:`.context_ladder`), the changes
against a baseline (:mod:`.changes`), the Prefect artifacts (:mod:`.markdown`), the levels,
comparisons and ad-hoc SQL as tables, CSV and JSON (:mod:`.tables`), the end of a night or a
validation (:mod:`.night`), the plans (:mod:`.plan`) and a plan's replay (:mod:`.replay`).

Nothing here reads the warehouse or judges a number: the rows come from
:mod:`sparkcap.publish.marts` and every verdict is the mart's (``fct_capacity.capacity_verdict``
words each case in dbt). Kept free of DuckDB and pandas at import, so that ``sparkcap --help``
can print through these consoles without loading the warehouse.
"""
