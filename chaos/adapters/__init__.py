"""Adapters and the helpers to write them: the reference engine on SQLite (reference) and on
PostgreSQL (postgres), the declarative helpers for any engine on SQLite (sql) and for a library
without a job table, read from its own rows (rows), and the shipped adapters of such libraries
(huey, litequeue, persistqueue: the extra ``engines`` installs them) on the pipeline they run
(queue_pipeline), and DBOS Transact's (dbos) on that pipeline as a workflow (dbos_workflow). The
contract they implement is :mod:`chaos.adapter`.
"""

__all__ = ["dbos", "dbos_workflow", "huey", "litequeue", "persistqueue", "postgres", "queue_pipeline", "reference", "rows", "sql"]
