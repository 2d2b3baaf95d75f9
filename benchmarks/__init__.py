"""Benchmarks for context-harness: ``python -m benchmarks [name ...] [--quick|--smoke]``.

``make bench`` runs them all and writes ``benchmarks/results/`` (report.md, charts, JSON).
"""
