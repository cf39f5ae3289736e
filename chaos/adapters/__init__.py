"""Adapters and the helpers to write them: the reference engine on SQLite (reference) and on
PostgreSQL (postgres), and the declarative helpers for any engine on SQLite (sql). The contract
they implement is :mod:`chaos.adapter`.
"""

__all__ = ["postgres", "reference", "sql"]
