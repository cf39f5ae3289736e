"""Engines on a connection pool: the SQLite connections a library opens itself, seen by the harness.

An engine on a pool (DBOS Transact, anything on SQLAlchemy) offers no ``connection()``: it opens
connections when it needs them, in any thread. Without one, the harness could name no writer and
would switch off the crash and pause classes, the disk-full and held-lock faults and
``fenced-writes``. Such an adapter declares ``connections = "pool"``; then, in a worker's own
process (never the harness's), :func:`intercept` hooks ``sqlite3.connect`` before the session opens,
so that every connection the library opens on the scenario's database joins a :class:`Pool`. The
pool is what :func:`chaos.core.context.store_conn` gives for that session: it names each
connection's writer, traces each one's statements, says whether any is in a transaction, and runs
a pragma (the disk-full fault's ``max_page_count``) on every one, those opened later too.

>>> import os, sqlite3, tempfile
>>> db = os.path.join(tempfile.mkdtemp(), "engine.db")
>>> pool = intercept(db)
>>> conn = sqlite3.connect(db)  # as a library opens one
>>> pool.create_function("chaos_writer", 0, lambda: "w-1")
>>> conn.execute("SELECT chaos_writer()").fetchone()
('w-1',)
>>> later = sqlite3.connect(db)  # opened after: given the same
>>> later.execute("SELECT chaos_writer()").fetchone()
('w-1',)
>>> release()
"""

from __future__ import annotations

import os
import sqlite3
import sqlite3.dbapi2
import threading
from typing import Any, Callable

from chaos.core.models import Connections, connections_model

__all__ = ["Connections", "Pool", "connections_model", "intercept", "release", "current", "harness_connect"]

_ORIGINAL_CONNECT = sqlite3.connect


class Pool:
    """The connections a library opened on one database in this process, and what the harness set
    on them (functions, a trace callback, pragmas), applied to each one opened later too."""

    def __init__(self, db_path: str) -> None:
        self.db_path = os.path.realpath(db_path)
        self._conns: list[sqlite3.Connection] = []  # sqlite3's connections take no weak reference
        self._functions: dict[tuple[str, int], Callable[..., Any]] = {}
        self._trace: Callable[[str], None] | None = None
        self._pragmas: dict[str, str] = {}
        self._lock = threading.Lock()

    def _adopt(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            self._conns = [c for c in self._conns if _open(c)] + [conn]
            for (name, n), fn in self._functions.items():
                conn.create_function(name, n, fn)
            if self._trace is not None:
                conn.set_trace_callback(self._trace)
            for statement in self._pragmas.values():
                conn.execute(statement)

    def connections(self) -> list[sqlite3.Connection]:
        with self._lock:
            self._conns = [c for c in self._conns if _open(c)]
            return list(self._conns)

    def create_function(self, name: str, n: int, fn: Callable[..., Any]) -> None:
        self._functions[(name, n)] = fn
        for conn in self.connections():
            conn.create_function(name, n, fn)

    def set_trace_callback(self, fn: Callable[[str], None] | None) -> None:
        self._trace = fn
        for conn in self.connections():
            conn.set_trace_callback(fn)

    @property
    def in_transaction(self) -> bool:
        """Whether any connection of the pool is inside a transaction (nothing it wrote is durable yet)."""
        return any(_in_transaction(conn) for conn in self.connections())

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        """Run ``sql`` on every connection (one the library opens later runs it too where it is a
        ``PRAGMA x = value``); the first connection's cursor, or a scratch one's, is returned."""
        if sql.lstrip().upper().startswith("PRAGMA") and "=" in sql:
            self._pragmas[sql.split("=")[0].strip().upper()] = sql
        cursors = [conn.execute(sql, params) for conn in self.connections()]
        if cursors:
            return cursors[0]
        scratch = _ORIGINAL_CONNECT(self.db_path)
        try:
            return _Rows(scratch.execute(sql, params).fetchall())
        finally:
            scratch.close()


def _open(conn: sqlite3.Connection) -> bool:
    try:
        conn.total_changes
    except sqlite3.ProgrammingError:  # closed: the pool let it go
        return False
    return True


def _in_transaction(conn: sqlite3.Connection) -> bool:
    try:
        return conn.in_transaction
    except sqlite3.ProgrammingError:  # closed
        return False


class _Rows:
    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows

    def fetchone(self) -> Any:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[Any]:
        return self.rows


_current: Pool | None = None


def current() -> Pool | None:
    """This process's pool, where :func:`intercept` made one."""
    return _current


def _connect(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
    conn = _ORIGINAL_CONNECT(database, *args, **kwargs)
    pool = _current
    if pool is not None and isinstance(database, (str, os.PathLike)) and os.path.realpath(os.fspath(database)) == pool.db_path:
        pool._adopt(conn)
    return conn


def intercept(db_path: str) -> Pool:
    """Hook ``sqlite3.connect`` in this process: every connection opened on ``db_path`` from now on
    joins the returned pool (the one before it, if any, is forgotten)."""
    global _current
    _current = Pool(db_path)
    sqlite3.connect = sqlite3.dbapi2.connect = _connect  # type: ignore[assignment]
    return _current


def harness_connect(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
    """A connection of the harness's own (a probe's read at a paid call), never one of a pool's,
    even opened in a worker's process on the engine's database: its statements are not the
    engine's to trace, and a fault's pragmas are not for it."""
    return _ORIGINAL_CONNECT(database, *args, **kwargs)


def release() -> None:
    """Unhook ``sqlite3.connect``."""
    global _current
    _current = None
    sqlite3.connect = sqlite3.dbapi2.connect = _ORIGINAL_CONNECT  # type: ignore[assignment]
