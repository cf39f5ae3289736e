"""Benchmarks: the engine against SQLite's own limit and against its peers (``python -m benchmarks``)."""
