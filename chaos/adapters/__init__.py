"""The adapters of the reference engine: on SQLite (reference) and on PostgreSQL (postgres).
"""

__all__ = ["postgres", "reference"]
