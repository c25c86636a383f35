"""dbt, the one place every formula and judgement is written: its runner, and the live judge
that runs dbt's own macros during a search."""
