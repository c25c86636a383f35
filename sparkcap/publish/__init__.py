"""What the marts say, printed: typed readers, text, the report."""
