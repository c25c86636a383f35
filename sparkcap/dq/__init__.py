"""Data-quality gates (Great Expectations) and their offline reports."""
