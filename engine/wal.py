"""Switching an SQLite file to WAL while other processes open it at the same moment.

The switch takes an exclusive lock for which SQLite's busy handler does not wait (a connection
upgrading from the shared lock it read the journal mode under could deadlock), so processes that
open a new file at once get "database is locked" at once, whatever their busy timeout. The engine's
store and the harness's ledgers open their files through :func:`use_wal`, which waits.

>>> import os, sqlite3, tempfile
>>> conn = sqlite3.connect(os.path.join(tempfile.mkdtemp(), "w.db"))
>>> use_wal(conn, timeout_s=1.0)
>>> conn.execute("PRAGMA journal_mode").fetchone()[0]
'wal'
"""

from __future__ import annotations

import sqlite3
import time

__all__ = ["use_wal"]

RETRY_DELAY_S_MAX = 0.05


def use_wal(conn: sqlite3.Connection, *, timeout_s: float) -> None:
    """Put ``conn``'s file in WAL mode (a no-op if it is), retrying a locked file for ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    delay = 0.001
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode=WAL")  # not a crash point: a file is put in WAL mode when the database is created
            return
        except sqlite3.OperationalError as exc:  # not a crash point: a file is put in WAL mode when the database is created
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, RETRY_DELAY_S_MAX)
