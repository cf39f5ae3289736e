"""A harness ledger on SQLite: written by many processes at once, kept through their SIGKILL.

The world's ledger of paid calls and deliveries, the soak's call ledger and the receiver's record
are each one SQLite file that every forked process opens for itself. Each write is its own
autocommit transaction in WAL mode with ``synchronous=OFF``: the data survives the writer's
SIGKILL once the write returns (the OS holds it), not a power loss, which these files never face.

>>> import os, tempfile
>>> conn = open_ledger(os.path.join(tempfile.mkdtemp(), "l.db"), ("CREATE TABLE IF NOT EXISTS t (x)",))
>>> conn.execute("PRAGMA journal_mode").fetchone()[0]
'wal'
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterable

from engine.wal import use_wal

__all__ = ["BUSY_TIMEOUT_S", "SYNCHRONOUS", "open_ledger"]

BUSY_TIMEOUT_S = 30.0


SYNCHRONOUS = ("OFF", "NORMAL", "FULL")


def open_ledger(path: str, schema: Iterable[str], *, synchronous: str = "OFF",
                timeout_s: float = BUSY_TIMEOUT_S) -> sqlite3.Connection:
    """This process's connection to the ledger at ``path``, its ``schema`` created if missing."""
    if synchronous not in SYNCHRONOUS:
        raise ValueError(f"synchronous={synchronous!r}: use one of {', '.join(SYNCHRONOUS)}")
    conn = sqlite3.connect(path, isolation_level=None, timeout=timeout_s, check_same_thread=False)
    # The world opens its ledger lazily, inside the iteration a recorder traces for crash points;
    # engine.wal's lines run here for the harness, not for the engine under test, so they are
    # hidden from the tracer (else a forked child, which opens its own ledger, reaches lines the
    # recording did not and the plan's points are called non-deterministic).
    tracer = sys.gettrace()
    sys.settrace(None)
    try:
        use_wal(conn, timeout_s=timeout_s)
    finally:
        sys.settrace(tracer)
    conn.execute(f"PRAGMA synchronous={synchronous}")  # one of SYNCHRONOUS
    for statement in schema:
        conn.execute(statement)
    return conn
