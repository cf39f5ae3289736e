"""The store's failures the harness can bring on: the write lock held elsewhere, the disk full, a
disk whose writes or reads fail.

Two uses share them. The faults of the host (:mod:`chaos.hostfaults`) inject them into a frozen
worker and let it run on. The crash matrix's store families (``store-busy``, ``disk-full``,
``commit-io-error`` and the others) bring one on *during a call* of the doomed iteration (a world
fault of a kind in :data:`chaos.core.world.STORE_FAULT_KINDS`): the call answers, and the commit
that follows meets a busy, full or failing database; the engine's error path then runs, and every
line of it is a crash point like any other. A kill there leaves what a real restart finds after
a full disk, a failed write or a held lock, and the recovery, in a fresh process, meets none.

* the lock: another connection's ``BEGIN IMMEDIATE`` on SQLite (on PostgreSQL, the adapter's
  tables locked ``IN EXCLUSIVE MODE``), held until :meth:`HeldLock.release`;
* a damaged row: a payload or a memo output overwritten with :data:`DAMAGED_JSON`, through the
  adapter's declared schema (the crash matrix's ``damaged-payload`` family does it in its setup);
* the disk: SQLite's ``PRAGMA max_page_count`` lowered to the database's current size on the
  worker's own connection, in a database made with :data:`PAGE_BYTES`-byte pages so that the next
  write needs a page (:func:`small_pages`);
* the device: the process's ``pwrite`` (or ``pread``) calls failing with EIO through libfiu's
  preload (:data:`IO_FAULTS`), in a worker descended from a process started by ``fiu-run``.

>>> InCall(None, "engine.db", None)("power_cut")
Traceback (most recent call last):
...
ValueError: store fault 'power_cut' is not one of: disk_full, io_error, io_read_error, lock_held
"""

from __future__ import annotations

import dataclasses
import errno
import sqlite3
from collections.abc import Callable
from typing import Any, TYPE_CHECKING

from chaos.core import libfiu
from chaos.adapters.postgres import SET_WRITER, is_postgres
from chaos.core.context import is_sqlite, store_conn
from chaos.core.world import STORE_FAULT_KINDS

if TYPE_CHECKING:
    from chaos.core.target import Target

__all__ = [
    "DAMAGED_JSON",
    "DAMAGED_STATE",
    "IO_FAULTS",
    "PAGE_BYTES",
    "HeldLock",
    "InCall",
    "ScenarioDb",
    "fill_disk",
    "small_pages",
]

# The smallest page SQLite allows, so that a few rows fill a page and most transactions need a new
# one: lowering max_page_count then fills the disk within a write or two, as a full disk does at
# some random write. (With 4 KiB pages, the few rows of a scenario never need a page, and the
# fault would never show.)
PAGE_BYTES = 512
DAMAGED_JSON = '{"garbled": '  # what a damaged payload or memo output is overwritten with
DAMAGED_STATE = "garbled"  # the state a damaged job's row is given: not in any table
DISK_PAGES_LEFT = 0  # max_page_count is lowered to the current size plus this
LOCK_TABLES_PG = "LOCK TABLE {tables} IN EXCLUSIVE MODE"  # the tables the adapter's schema names
LOCK_TAKE_TIMEOUT_PG = "SET lock_timeout = '5s'"  # a frozen peer's row locks never hang the harness
# How long a worker that meets the held lock waits for it (its session's set_busy_timeout): long
# enough to be a real wait (SQLite's busy handler sleeps and retries several times), short enough
# that a matrix of such points stays quick. Nothing releases the lock while the iteration runs (it
# is lifted once the iteration has ended), so every such wait ends busy, however long it is: at
# 0.05 s, the waits were most of what the points after a heartbeat cost.
BUSY_TIMEOUT_S = 0.01
# The I/O errors a call brings on, as libfiu failure points (see chaos.core.libfiu): the process's
# writes fail with EIO (a COMMIT cannot write its WAL frames), or its reads do (a page that is not
# in SQLite's cache cannot be read). Only this process's calls fail: the recovery, in a fresh
# process, meets a disk that works again.
IO_FAULTS: dict[str, tuple[tuple[str, int], ...]] = {
    "io_error": (("posix/io/rw/pwrite", errno.EIO),),
    "io_read_error": (("posix/io/rw/pread", errno.EIO),),
}


class ScenarioDb:
    """A short connection of the harness's own to a scenario database: a SQLite file, or a
    PostgreSQL URL (``postgresql://...``). Queries are written once, with SQLite's ``?``
    placeholders, and run on either; each statement commits on its own (autocommit).

    ``writer`` names who the audit triggers record for this connection's writes (the harness
    writes as a person, :data:`chaos.adapters.reference.HUMAN_WRITER`).
    """

    def __init__(self, db: str, *, writer: str | None = None) -> None:
        self.postgres = is_postgres(db)
        if self.postgres:
            import psycopg

            self.conn: Any = psycopg.connect(db, autocommit=True)
            if writer is not None:
                self.conn.execute(SET_WRITER, (writer,))
        else:
            # Not bound to its thread: a lock a step's call takes on the step thread is released by
            # the worker's thread once the iteration has ended.
            self.conn = sqlite3.connect(db, isolation_level=None, timeout=30, check_same_thread=False)
            if writer is not None:
                self.conn.create_function("chaos_writer", 0, lambda: writer)

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        """Run one statement; ``?`` marks a parameter on both backends (no query here has a literal
        ``?`` or ``%``)."""
        return self.conn.execute(sql.replace("?", "%s") if self.postgres else sql, params)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "ScenarioDb":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class HeldLock:
    """Another session's lock on every write of the engine, held until :meth:`release`."""

    def __init__(self, conn: ScenarioDb) -> None:
        self.conn = conn

    @classmethod
    def take(cls, db: str, schema: Any = None) -> "HeldLock | None":
        """Take the lock, or None if another transaction holds what it needs (nothing to inject).
        On PostgreSQL the lock is on the tables of ``schema`` (the adapter's; without one, None)."""
        if schema is None and is_postgres(db):
            return None
        conn = ScenarioDb(db)
        try:
            if conn.postgres:
                conn.execute(LOCK_TAKE_TIMEOUT_PG)
                conn.execute("BEGIN")
                conn.execute(LOCK_TABLES_PG.format(tables=", ".join(f'"{t}"' for t in schema.tables())))
            else:
                conn.execute("BEGIN IMMEDIATE")
        except Exception:
            conn.close()
            if conn.postgres:
                return None
            raise
        return cls(conn)

    def release(self) -> None:
        try:
            self.conn.execute("ROLLBACK")
        finally:
            self.conn.close()


def fill_disk(session: Any) -> Callable[[], None]:
    """The disk is full at the database's current size, for ``session``'s connection; returns what
    frees it again."""
    conn = store_conn(session)
    if not is_sqlite(conn):
        raise TypeError("the disk-full fault needs a session that offers connection() -> its sqlite3.Connection "
                        "(see chaos.adapter.CAPABILITIES)")
    limit = conn.execute("PRAGMA max_page_count").fetchone()[0]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {int(pages) + DISK_PAGES_LEFT}")  # integers we read
    return lambda: conn.execute(f"PRAGMA max_page_count = {int(limit)}")


def small_pages(adapter: Target) -> Any:
    """``adapter``, creating its databases with :data:`PAGE_BYTES`-byte pages (see there).

    An adapter whose databases are not files (PostgreSQL: it builds its own template database)
    is returned as it is: the page size only serves the disk fault, which does not run there.
    """
    if adapter.server is not None:
        return adapter
    return dataclasses.replace(adapter, create=_SmallPages(adapter.create))


class _SmallPages:
    """A target's ``create``, on a file whose pages are small (picklable, as a target is)."""

    def __init__(self, create: Callable[..., None]) -> None:
        self._create = create

    def __call__(self, db_path: str, *, attribute_writers: bool = True) -> None:
        conn = sqlite3.connect(db_path, isolation_level=None)
        try:
            conn.execute(f"PRAGMA page_size = {PAGE_BYTES}")  # a constant
            conn.execute("VACUUM")  # writes the empty file's header with that page size
        finally:
            conn.close()
        self._create(db_path, attribute_writers=attribute_writers)


class InCall:
    """The store faults a doomed iteration's calls bring on, for one session (in the doomed child).

    Installed as the world's ``on_store_fault``: a call that meets a ``lock_held`` fault takes
    the lock (and shortens the session's busy timeout, so that the wait is real but short); one
    that meets ``disk_full`` fills the session's disk. :meth:`lift` removes both once the iteration
    has ended (a killed child's go with it).
    """

    def __init__(self, adapter: Target, db: str, session: Any) -> None:
        self.adapter = adapter
        self.db = db
        self.session = session
        self._lifts: list[Callable[[], None]] = []

    def __call__(self, kind: str) -> None:
        if kind in IO_FAULTS:
            self._lifts.append(libfiu.enable(IO_FAULTS[kind], kind))
        elif kind == "lock_held":
            lock = HeldLock.take(self.db, self.adapter.schema)
            if lock is None:
                raise RuntimeError(f"the lock_held fault could not take the write lock of {self.db!r}")
            setter = getattr(self.session, "set_busy_timeout", None)
            if callable(setter):
                setter(BUSY_TIMEOUT_S)
            self._lifts.append(lock.release)
        elif kind == "disk_full":
            self._lifts.append(fill_disk(self.session))
        else:
            raise ValueError(f"store fault {kind!r} is not one of: {', '.join(sorted(STORE_FAULT_KINDS))}")

    def lift(self) -> None:
        while self._lifts:
            self._lifts.pop()()
