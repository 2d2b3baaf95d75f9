"""Benchmarks for context-harness (run with ``python -m benchmarks.<name>``)."""
