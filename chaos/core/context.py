"""One run's context: the engine's database, the world and the clock a run's processes share, and
how a process opens a worker's session on them.

Every mode runs in one: a crash matrix scenario (:class:`chaos.core.scenario.Run`), a random
history (:class:`chaos.histories.lives.Env`) and a scripted fault plan
(:class:`chaos.core.sandbox.Sandbox`) each extend :class:`RunContext` with what only it needs (a
scenario's seeds, a history's worker lives, a plan's person-facing helpers). What they share is
here once: where the database is, how a session opens (the engine reads the run's clock, and its
writes name their writer), how a session is closed after the worker may have died mid-statement,
and how the run's database is given back (closed by the adapter, dropped by the process that made
it, never by a forked child closing its copy).
"""

from __future__ import annotations

import os
import random
import sqlite3
from typing import Any, TYPE_CHECKING

from chaos.core import pool
from chaos.core.clock import engine_reads
from chaos.core.models import EnginesPerProcess, engines_per_process
from chaos.core.process import in_child
from chaos.core.world import World

if TYPE_CHECKING:
    from chaos.core.target import Target

__all__ = ["RunContext", "EnginesPerProcess", "engines_per_process", "store_conn", "attribute_writes", "close_quietly", "offers", "is_sqlite"]

# Sessions (by id) whose engine opens its own connections, and the pool of those (chaos.core.pool).
_POOLED: dict[int, pool.Pool] = {}


class RunContext:
    """The files, clock and world of one run, in ``directory``.

    ``db`` is the engine's database: ``<directory>/engine.db`` unless the adapter made one of its
    own (a PostgreSQL database, see :func:`chaos.core.template.copy_template`); ``drop`` says the
    run owns it and drops it in :meth:`give_back`.
    """

    def __init__(self, target: Target, directory: str, clock: Any, world: World, db: str | None = None, *,
                 drop: bool = False) -> None:
        self.target = target
        self.directory = directory
        self.db = db if db is not None else os.path.join(directory, "engine.db")
        self.clock = clock
        self.world = world
        self.drop = drop
        self.owner_pid = os.getpid()  # only this process drops ``db``, never a forked child

    @property
    def adapter(self) -> Target:
        """The run's target (the name the phases knew it by)."""
        return self.target

    def open_session(self, worker_id: str, rng: random.Random) -> Any:
        """A new session of the adapter for ``worker_id`` on this run's database.

        In a worker's own process (a forked child, never the test's) an engine on the machine's
        time reads the run's clock (see :func:`chaos.core.clock.engine_reads`); the session's
        writes name their writer for the audit triggers (:func:`attribute_writes`).
        """
        pooled = in_child() and self.target.connections is pool.Connections.POOL
        if in_child():
            engine_reads(self.target, self.clock)
        connections = pool.intercept(self.db) if pooled else None  # before the engine opens any connection
        session = self.target.open(self.db, self.world, worker_id=worker_id, clock=self.clock, rng=rng)
        if connections is not None:
            _POOLED[id(session)] = connections
        attribute_writes(session, worker_id)
        return session

    def give_back(self) -> None:
        """Close the world's ledger, let the adapter release the database, and drop it if this
        run owns it and this is the process that made it."""
        self.world.close()
        if self.target.release is not None:
            self.target.release(self.db)
        server = self.target.server
        if self.drop and os.getpid() == self.owner_pid and server is not None:
            self.drop = False
            server.drop_db(self.db)


def store_conn(session: Any) -> Any:
    """The database connection under a session: its ``connection()`` capability, or the pool of
    connections its engine opens itself (``connections = "pool"``, :mod:`chaos.core.pool`), or None."""
    connection = getattr(session, "connection", None)
    if callable(connection):
        return connection()
    return _POOLED.get(id(session))


def is_sqlite(conn: Any) -> bool:
    """Whether ``conn`` (from :func:`store_conn`) is SQLite's: one connection, or a pool of them."""
    return isinstance(conn, (sqlite3.Connection, pool.Pool))


def offers(target: Target, session: Any, name: str) -> bool:
    """Whether ``session`` offers the session method ``name``; ``connection`` also where the
    adapter declares ``connections = "pool"`` (the harness then finds the connections itself)."""
    if name == "connection" and target.connections is pool.Connections.POOL:
        return True
    return callable(getattr(session, name, None))


def attribute_writes(session: Any, worker_id: str) -> None:
    """Name the writer of every write on the session's SQLite connection (``chaos_writer()``, read
    by the writer-attribution triggers): the session's ``writer`` where it has one (a person's
    action writes as ``"human"``), else the worker's id."""
    conn = store_conn(session)
    if is_sqlite(conn):
        conn.create_function("chaos_writer", 0, lambda: getattr(session, "writer", worker_id))


def close_quietly(session: Any) -> None:
    """Close a session whose worker may have been abandoned mid-statement (closing rolls it back)."""
    try:
        session.close()
    except Exception:  # closing is best effort: what went wrong is reported by the run itself
        pass
