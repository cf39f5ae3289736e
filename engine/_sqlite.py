"""Storage on SQLite: the connection, its write lock, its errors and its schema mark.

The statements and the logic are :class:`~engine._sqlstore.SqlStore`'s; what is SQLite's own is
here. Every write begins with ``BEGIN IMMEDIATE``, so a writer takes the database's write lock up
front instead of failing half-way when it upgrades a read lock; a lock held longer than
``busy_timeout_s`` is :class:`~engine.StoreBusy`, and a failing disk (``SQLITE_FULL``,
``SQLITE_IOERR``) or a damaged page is :class:`~engine.StoreFailed`. Opening checks the path first
and turns what SQLite says into one typed line (see :mod:`engine._opening`).

``synchronous`` is a documented setting:

* ``NORMAL`` (default) in WAL mode survives any process crash (SIGKILL, OOM, a panic): a committed
  transaction is in the WAL file, which the OS writes out even if the process dies. A power loss or
  kernel crash loses every commit since the last checkpoint (the WAL is fsynced only there), and
  never corrupts the file. The engine checkpoints every :data:`WAL_AUTOCHECKPOINT_PAGES` pages,
  about 1,300 step commits: a cut loses up to that many acknowledged commits, fewer the sooner it
  follows a checkpoint (measured in the power soak, 16 cuts: 92 to 1,313 per cut, 747 on average;
  with SQLite's default of 1,000 pages, 9 cuts: 22 to 300). The loss grows in proportion to the
  checkpoint interval.
* ``FULL`` also fsyncs the WAL on every commit, so a commit survives a power loss too, at the cost of
  one fsync per transaction.

The file is marked with ``PRAGMA application_id`` and its schema version with ``user_version``.

>>> store = SqliteStore(":memory:")
>>> store.submit("doc-1", {"url": "file:///a.txt"}, now=0.0).state
'pending'
"""

from __future__ import annotations

import contextlib
import os
import sqlite3

from ._errors import InvalidInput, SchemaMismatch, StoreBusy, StoreFailed
from ._opening import MEMORY, check_sqlite_path, sqlite_connect_target, sqlite_file, sqlite_open_error
from ._sql import SQLITE
from ._sqlstore import SqlStore
from ._store import APPLICATION_ID, SCHEMA_VERSION
from .wal import use_wal

__all__ = ["SqliteStore", "SYNCHRONOUS_LEVELS", "WAL_AUTOCHECKPOINT_PAGES", "PAGE_SIZE"]

SYNCHRONOUS_LEVELS = ("OFF", "NORMAL", "FULL", "EXTRA")
# SQLite checkpoints the WAL into the database file every wal_autocheckpoint pages (default 1000),
# and at NORMAL that is where the fsyncs happen. A step completion writes about 3.5 pages (the job
# row, the memo row, at times an index or the outbox), so the default would checkpoint, and fsync,
# every ~290 commits; at 4000 pages it does so every ~1100, as often per commit as a one-page
# transaction does at the default. The WAL grows to 4000 pages (4 MiB at the engine's page
# size) before it is reset. Against a process crash durability is unchanged: a committed
# transaction is in the WAL either way. Against a power cut at NORMAL it is not: the commits since
# the last checkpoint are lost, up to ~1,300 here against ~300 at the default (measured: see the
# module docstring); FULL fsyncs every commit and loses none at any interval.
WAL_AUTOCHECKPOINT_PAGES = 4000
# The page size of a new database, in bytes (SQLite's default is 4096). A commit writes each page
# it changed to the WAL, whole, and a step completion changes three or four: the job's row, the
# memo row, an index entry, the outbox row. The engine's rows are small (the payload and the
# results, which can be large, are written once each, not with every step), and with 1 KiB
# pages the engine runs about 14% more reference jobs per second than with 4 KiB (16 alternating
# runs, docs/explanation/benchmarks.md). A database keeps the page size it was created with.
PAGE_SIZE = 1024
CLAIM_PLAN = "EXPLAIN QUERY PLAN SELECT id FROM job WHERE next_run_at <= 0 ORDER BY next_run_at LIMIT 1"
SELECT_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"


class SqliteStore(SqlStore):
    """The engine's database on SQLite: one per process, opened after any ``fork``, never shared.

    >>> SqliteStore(":memory:").claim("w", now=0.0, lease_s=60.0, starts={}) is None
    True
    """

    dialect = SQLITE
    page_size = PAGE_SIZE  # of a database it creates (one it opens keeps its own)

    def __init__(
        self,
        path: str,
        *,
        synchronous: str = "NORMAL",
        busy_timeout_s: float = 5.0,
        workflow: str = "reference",
        create: bool = True,
        read_only: bool = False,
    ) -> None:
        if synchronous.upper() not in SYNCHRONOUS_LEVELS:
            raise InvalidInput(f"synchronous={synchronous!r} is not one of {', '.join(SYNCHRONOUS_LEVELS)}")  # not a crash point: a bad setting, refused when the store opens
        database, uri = sqlite_connect_target(path, read_only=read_only)
        path = sqlite_file(path)
        self.path = path
        self.workflow = workflow
        self.busy_timeout_s = busy_timeout_s
        self.read_only = read_only
        # create=False: a missing file is an error, not a new database; a read-only store never creates one.
        check_sqlite_path(path, create=create and not read_only)
        new_file = path != MEMORY and not read_only and _create_exclusively(path)  # this open's own file, if it makes one
        try:
            self.conn = sqlite3.connect(database, uri=uri, isolation_level=None, timeout=busy_timeout_s, check_same_thread=False)
        except sqlite3.Error as exc:  # not a crash point: a database that cannot be opened, refused before any claim
            raise sqlite_open_error(path, exc) from exc
        try:
            self.conn.row_factory = sqlite3.Row
            self._ensure_schema()
            if path != MEMORY and not read_only:
                use_wal(self.conn, timeout_s=self.busy_timeout_s)
                self.conn.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")  # a constant
            self.conn.execute(f"PRAGMA synchronous={synchronous.upper()}")  # validated above
        except BaseException as exc:  # not a crash point: a database that cannot be opened, refused before any claim
            self.conn.close()
            if new_file:
                _remove_if_empty(path)  # a file this open made and wrote nothing into (a full disk): not left behind
            if isinstance(exc, sqlite3.Error):
                raise sqlite_open_error(path, exc) from exc
            raise

    # -- the write lock and errors ------------------------------------------------------------------
    @staticmethod
    def redacted(url: str) -> str:
        """``url`` as it may be shown in a message: a SQLite path holds no password, so as it is
        (the same call on :class:`PostgresStore` hides one).

        >>> SqliteStore.redacted("jobs.db")
        'jobs.db'
        """
        return url

    def _begin(self) -> None:
        if self.read_only:
            raise InvalidInput(f"database {self.path!r} was opened read_only=True; open it without read_only to change it")  # not a crash point: a read-only store is never given to a worker
        if self.conn.in_transaction:
            self._rollback()  # what a failing disk left open (see _rollback)
        self.conn.execute("BEGIN IMMEDIATE")

    def _rollback(self) -> None:
        """Roll back what is left of a failed transaction, if anything is.

        After ``SQLITE_FULL`` or an I/O error SQLite may have rolled the transaction back by itself
        (a second ROLLBACK would fail), and on a failing disk the ROLLBACK itself may fail: the
        transaction is then left open and the next write rolls it back before its BEGIN, so a
        connection is never stuck inside a transaction that a fault abandoned.
        """
        if self.conn.in_transaction:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.DatabaseError:
                pass

    def _failure(self, exc: BaseException, where: str) -> Exception | None:
        """StoreBusy for a lock, StoreFailed for the machine; None for anything else (a bug, a constraint)."""
        if not _machine_failure(exc):
            return None  # not a crash point: a bug guard: in an iteration, a statement fails otherwise than by a lock or the machine only if it is wrong
        text = str(exc)
        if "locked" in text or "busy" in text:
            if where == "COMMIT":
                return StoreBusy(f"database {self.path!r} stayed locked at commit")  # not a crash point: in WAL mode a COMMIT after BEGIN IMMEDIATE holds every lock it needs
            return StoreBusy(f"database {self.path!r} stayed locked for {self.busy_timeout_s}s; another process holds its write lock")
        code = getattr(exc, "sqlite_errorname", "SQLITE_ERROR")
        where = "BEGIN IMMEDIATE" if where == "BEGIN" else where
        return StoreFailed(
            f"database {self.path!r}: {where} failed with {code} ({exc}); nothing of it was written (a worker "
            "backs off and tries again by itself); free disk space or check the device, and if the file is damaged, "
            "restore it from a backup"
        )

    # -- the schema mark ----------------------------------------------------------------------------
    def _ensure_schema(self) -> None:
        app_id, version, tables = self._schema_facts()
        if app_id == APPLICATION_ID and version == SCHEMA_VERSION:
            return
        self._refuse_foreign(app_id, version, tables)  # not a crash point: the schema is created with the database, before any job is submitted
        if self.read_only:  # not a crash point: a read-only store is never given to a worker
            self._refuse_to_write_schema(app_id, version)
        if app_id == 0 and not tables:  # not a crash point: the schema is created with the database, before any job is submitted
            self.conn.execute(f"PRAGMA page_size = {int(self.page_size)}")  # a new file's, set before its first page is written
        with self._write() as conn:  # not a crash point: the schema is created with the database, before any job is submitted
            app_id, version, tables = self._schema_facts()  # another process may have won the race
            if app_id == APPLICATION_ID and version == SCHEMA_VERSION:
                return
            self._refuse_foreign(app_id, version, tables)
            if app_id == APPLICATION_ID:  # not a crash point: an older schema is upgraded when the database is opened, before any claim
                statements = self.sql.migration(version) or ()  # _refuse_foreign refused a version without one
            else:  # a new database
                statements = self.sql.SCHEMA
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")  # constants, not input
            for statement in statements:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _schema_facts(self) -> tuple[int, int, list[str]]:
        # One read transaction: read one by one, the facts could straddle another process's commit
        # of a new schema (tables already there, application_id not yet) and call the file foreign.
        in_transaction = self.conn.in_transaction
        if not in_transaction:
            self.conn.execute("BEGIN")
        try:
            app_id = self.conn.execute("PRAGMA application_id").fetchone()[0]
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]
            return app_id, version, [r[0] for r in self.conn.execute(SELECT_TABLES)]
        finally:
            if not in_transaction and self.conn.in_transaction:  # an error may have ended it (a full disk): its own message stands
                self.conn.execute("COMMIT")

    def _refuse_foreign(self, app_id: int, version: int, tables: list[str]) -> None:
        if app_id == APPLICATION_ID and version > SCHEMA_VERSION:
            raise SchemaMismatch(
                f"database {self.path!r} has schema version {version}, newer than this engine's "
                f"{SCHEMA_VERSION}; upgrade crashgate to open it (the file was not modified)"
            )
        if app_id == APPLICATION_ID and version < SCHEMA_VERSION and self.sql.migration(version) is None:
            raise SchemaMismatch(f"database {self.path!r} is marked as crashgate's with schema version {version}, which no "
                                 "crashgate wrote; refusing to modify it (the file was not modified): restore it from a backup")
        if app_id != APPLICATION_ID and (app_id != 0 or tables):
            raise SchemaMismatch(
                f"database {self.path!r} was not created by crashgate (application_id={app_id}, "
                f"tables: {', '.join(tables) or 'none'}); refusing to modify it: pass the path of a new "
                "or an existing crashgate database"
            )

    def _refuse_to_write_schema(self, app_id: int, version: int) -> None:
        """A read-only store finds no schema it can read: an empty file (or a new one), or an older
        schema. It writes neither, and says which command does."""
        if app_id == 0:
            raise SchemaMismatch(
                f"database {self.path!r} is empty: it holds no crashgate database, and this command only reads (it "
                "was not modified); check the path, or create the database with `python -m engine submit`"
            )
        raise SchemaMismatch(
            f"database {self.path!r} has schema version {version}, older than this engine's {SCHEMA_VERSION}, and "
            "this command only reads (it was not modified); a command that writes upgrades it when it opens it "
            "(`python -m engine work`, or open_store(...) without read_only)"
        )

    def claim_plan(self) -> str:
        """The claim's query plan, as SQLite reports it (tests check it uses ``job_due``)."""
        return " / ".join(row[3] for row in self.conn.execute(CLAIM_PLAN))


def _create_exclusively(path: str) -> bool:
    """Make the file at ``path`` if there is none (True: this process made it); never raises."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except OSError:  # it exists (another process may be creating it), or cannot be made: sqlite3 says which
        return False
    return True


def _remove_if_empty(path: str) -> None:
    """Remove ``path``, a file this process made, if it still holds nothing (0 bytes) and no other
    connection is writing it (no journal, no WAL: another process that opened it meanwhile may be
    creating the schema); never raises."""
    try:
        if os.path.getsize(path) != 0 or any(os.path.lexists(f"{path}{suffix}") for suffix in ("-journal", "-wal")):
            return
        os.unlink(path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}-shm")
    except OSError:
        pass


def _machine_failure(exc: BaseException) -> bool:
    """A failure of the file or the disk under it (full, I/O error, damaged page, read-only), not
    of the statement: an IntegrityError (a second memo row) or a ProgrammingError is a bug."""
    return isinstance(exc, sqlite3.OperationalError) or type(exc) in (sqlite3.DatabaseError, sqlite3.InternalError)
