"""Storage on PostgreSQL: the same store as :class:`~engine.SqliteStore`, for workers on many machines.

The statements and the logic are :class:`~engine._sqlstore.SqlStore`'s, as on SQLite; one
contract-test suite runs against both. What is PostgreSQL's own is here: the connection and its
timeouts, how errors map to the engine's, and the schema mark. How the guarantees are obtained:

* **Short explicit transactions, row locks.** SQLite serialises writers with ``BEGIN IMMEDIATE``;
  here each write is one ``BEGIN ... COMMIT`` at READ COMMITTED that locks only the rows it
  touches, so workers on different jobs never wait for each other. Every compare-and-swap is a
  guarded ``UPDATE ... WHERE state = %(from)s AND lease_token = %(token)s``: PostgreSQL re-checks
  that guard on the newest row version after waiting for a concurrent writer, so a lost race
  changes zero rows, exactly as on SQLite.
* **The claim** picks its job with ``FOR UPDATE SKIP LOCKED`` inside one guarded
  ``UPDATE ... RETURNING``: two workers never wait for, nor take, the same job.
* **Lock timeouts.** ``lock_timeout`` (``busy_timeout_s``) and ``statement_timeout`` make a write
  that cannot get its locks give up; that, a deadlock or a serialisation failure is raised as
  :class:`~engine.StoreBusy`, after the transaction was rolled back, exactly like SQLite's busy
  timeout. ``idle_in_transaction_session_timeout`` lets the server end the transaction of a
  worker frozen mid-write (a GC pause, SIGSTOP), so the rows it locked do not stay locked.
* **A killed worker's connection drops; the server rolls its open transaction back.** A
  connection lost *during* COMMIT leaves the outcome unknown: that is
  :class:`~engine.CommitUnknown` (a :class:`~engine.StoreFailed`), never "nothing was written".

The schema is the SQLite one in PostgreSQL types; ids, states and step names use the "C"
collation, so they sort byte by byte as on SQLite. Table ``crashgate_schema`` marks a crashgate
database and holds the schema version; a database with other tables and no such mark, or a newer
version, is refused with a clear message and left untouched.

psycopg 3 is an optional dependency (``pip install 'crashgate[postgres]'``), imported only when a
``PostgresStore`` is opened.

>>> store = PostgresStore("postgresql://app@db.internal/jobs")      # doctest: +SKIP
>>> store.submit("doc-1", {"url": "file:///a.txt"}, now=0.0).state  # doctest: +SKIP
'pending'
"""

from __future__ import annotations

import re
import time
import urllib.parse
from typing import Any

from ._commit import commit_unknown
from ._errors import InvalidInput, SchemaMismatch, StoreBusy, StoreFailed
from ._sql import POSTGRESQL
from ._sqlstore import SqlStore
from ._store import APPLICATION_ID, SCHEMA_VERSION

__all__ = ["PostgresStore"]

STATEMENT_TIMEOUT_S_DEFAULT = 30.0
IDLE_IN_TRANSACTION_TIMEOUT_S_DEFAULT = 60.0
# SQLSTATEs after which the transaction was rolled back and nothing was written: the caller may
# simply try again later. lock_not_available, query_canceled (statement_timeout),
# deadlock_detected, serialization_failure.
BUSY_SQLSTATES = frozenset({"55P03", "57014", "40P01", "40001"})
# SQLSTATE classes of a failure of the machine rather than of the statement: connection
# exceptions (08), insufficient resources such as disk_full (53), operator intervention such as a
# server shutting down (57P), system errors such as io_error (58). Raised as StoreFailed, as
# SQLite's SQLITE_FULL and SQLITE_IOERR are: the worker backs off and tries again.
FAILED_SQLSTATE_PREFIXES = ("08", "53", "57P", "58")
# What a server that is starting up, recovering or shutting down answers a new connection (libpq
# gives no SQLSTATE for a refused connection; the server's messages are in English under lc_messages=C,
# as on the throwaway server). That is the server's state, not a bad URL: wait, then say so.
STARTING_UP_MESSAGES = (
    "the database system is starting up",
    "not yet accepting connections",
    "the database system is in recovery mode",
    "the database system is shutting down",
)
STARTUP_WAIT_S_DEFAULT = 30.0
STARTUP_DELAY_S_FIRST = 0.05
STARTUP_DELAY_S_MAX = 1.0
HIDDEN = "***"
# A password given as a parameter: in a URL's query string (?password=...) or a key=value string.
PASSWORD_PARAMETER = re.compile(r"(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&#]*)")
URL_FORM = "postgresql://user[:password]@host[:port]/dbname[?param=value&...]"

# The schema mark: a one-row table, created first, in the same transaction as the engine's tables.
CREATE_SCHEMA_MARK = """CREATE TABLE crashgate_schema (
    one            BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one), -- exactly one row
    application_id BIGINT NOT NULL,
    version        INTEGER NOT NULL
)"""
INSERT_SCHEMA_MARK = "INSERT INTO crashgate_schema (application_id, version) VALUES (%(app)s, %(version)s)"
UPGRADE_LOCK = "LOCK TABLE job IN ACCESS EXCLUSIVE MODE"
UPGRADE_NO_TIMEOUT = "SET LOCAL statement_timeout = 0"
UPDATE_SCHEMA_MARK = "UPDATE crashgate_schema SET version = %(version)s"
SELECT_SCHEMA_MARK = "SELECT application_id, version FROM crashgate_schema"
SELECT_TABLES = (
    "SELECT table_name FROM information_schema.tables "
    "WHERE table_schema = current_schema() ORDER BY table_name"
)
# Serialises schema creation between processes opening a new database at the same moment.
LOCK_SCHEMA_CREATION = "SELECT pg_advisory_xact_lock(%(key)s)"
SET_CONFIG = "SELECT set_config(%(name)s, %(value)s, false)"
CLAIM_PLAN = (
    "EXPLAIN (COSTS OFF) SELECT id FROM job WHERE next_run_at <= 0 ORDER BY next_run_at LIMIT 1 "
    "FOR UPDATE SKIP LOCKED"
)


class PostgresStore(SqlStore):
    """The engine's database on PostgreSQL: one connection per process, opened after any ``fork``.

    ``busy_timeout_s`` is how long a write waits for a row lock before it gives up with
    :class:`~engine.StoreBusy` (PostgreSQL's ``lock_timeout``), as on SQLite.
    """

    dialect = POSTGRESQL

    def __init__(
        self,
        url: str,
        *,
        busy_timeout_s: float = 5.0,
        statement_timeout_s: float = STATEMENT_TIMEOUT_S_DEFAULT,
        idle_in_transaction_timeout_s: float = IDLE_IN_TRANSACTION_TIMEOUT_S_DEFAULT,
        startup_wait_s: float = STARTUP_WAIT_S_DEFAULT,
        workflow: str = "reference",
    ) -> None:
        # ``startup_wait_s``: how long opening waits for a server that answers "the database
        # system is starting up" (a restart, a crash recovery), as a worker started with it would.
        for name, value in (("busy_timeout_s", busy_timeout_s), ("statement_timeout_s", statement_timeout_s),
                            ("idle_in_transaction_timeout_s", idle_in_transaction_timeout_s)):
            if not value > 0:
                raise InvalidInput(f"{name}={value!r} must be > 0 seconds")
        if not startup_wait_s >= 0:
            raise InvalidInput(f"startup_wait_s={startup_wait_s!r} must be >= 0 seconds")
        psycopg = _import_psycopg()
        self.url = url
        self.workflow = workflow
        self.busy_timeout_s = busy_timeout_s
        self._timeouts_s = (("lock_timeout", busy_timeout_s), ("statement_timeout", statement_timeout_s),
                            ("idle_in_transaction_session_timeout", idle_in_transaction_timeout_s))
        try:
            self.conn = self._connect_waiting(startup_wait_s)
        except psycopg.ProgrammingError as exc:  # libpq cannot parse it: the message may quote any part, the password too
            raise InvalidInput(f"database URL {_safe(url)} cannot be read: {_reason(exc, url)}; write it as {URL_FORM}, "
                               "with special characters percent-encoded (a space as %20)") from None
        except psycopg.OperationalError as exc:
            if _starting_up(exc):
                raise StoreFailed(f"database {_safe(url)}: the server is starting up (or recovering, or shutting down) and did "
                                  f"not accept connections within {startup_wait_s:g}s ({_reason(exc, url)}); nothing was done: "
                                  "try again in a moment") from None
            raise InvalidInput(f"cannot connect to {_safe(url)}: {_reason(exc, url)}; check the database URL and that the server runs") from None
        self.name = _describe(self.conn)
        self._ensure_schema()

    @staticmethod
    def redacted(url: str) -> str:
        """``url`` with its password hidden, wherever it is given: in the userinfo or as a
        ``password=`` parameter. For messages and output; it works on malformed URLs too (it only
        splits the text), so a URL refused as unreadable can still be named.

        >>> PostgresStore.redacted("postgresql://app:s3cret@db/jobs?password=other&sslmode=require")
        'postgresql://app:***@db/jobs?password=***&sslmode=require'
        """
        return _redact(url)

    def _connect_waiting(self, wait_s: float) -> Any:
        """:meth:`_connect`, trying again with backoff while the server says it is starting up."""
        import psycopg

        deadline = time.monotonic() + wait_s
        delay_s = STARTUP_DELAY_S_FIRST
        for _ in range(int(wait_s / STARTUP_DELAY_S_FIRST) + 2):
            try:
                return self._connect()
            except psycopg.OperationalError as exc:
                if not _starting_up(exc) or time.monotonic() + delay_s > deadline:
                    raise
            time.sleep(delay_s)
            delay_s = min(STARTUP_DELAY_S_MAX, delay_s * 2)
        raise AssertionError("_connect_waiting: the deadline ends the loop first")  # not a crash point: a bug guard

    def _connect(self) -> Any:
        import psycopg

        conn = psycopg.connect(self.url, autocommit=True)
        for setting, seconds in self._timeouts_s:
            conn.execute(SET_CONFIG, {"name": setting, "value": f"{round(seconds * 1000)}ms"})
        return conn

    # -- the connection, transactions and errors ------------------------------------------------------
    def _ready(self) -> None:
        """A connection the server dropped (a restart, a failover) is opened again on next use.

        The failure that revealed the loss was raised as StoreFailed, and the worker backed off;
        the transaction it was in was rolled back by the server. Reconnecting here lets the same
        worker resume without a restart. If the server is still down, this raises StoreFailed again.
        """
        if not self.conn.closed:
            return
        import psycopg

        try:
            self.conn = self._connect()
        except psycopg.OperationalError as exc:
            raise _store_failed(self.name, "reconnecting", exc) from exc

    def _begin(self) -> None:
        """BEGIN at READ COMMITTED: each write locks only the rows it touches."""
        self._ready()
        self.conn.execute("BEGIN")

    def _rollback(self) -> None:
        import psycopg

        if self.conn.closed:
            return  # the server rolls back the transaction of a dropped connection
        try:
            self.conn.execute("ROLLBACK")
        except psycopg.Error:
            pass  # the connection broke meanwhile: the next use reconnects

    def _failure(self, exc: BaseException, where: str) -> Exception | None:
        """StoreBusy for a lock or statement timeout, StoreFailed for the machine; None otherwise."""
        import psycopg

        if not isinstance(exc, psycopg.Error):
            return None
        if exc.sqlstate in BUSY_SQLSTATES:
            if where == "a read":
                return StoreBusy(f"database {self.name}: read timed out ({exc.sqlstate}); try again later")
            return StoreBusy(
                f"database {self.name}: {type(exc).__name__} ({exc.sqlstate}) within {self.busy_timeout_s}s; "
                "another transaction holds the rows this write needs; nothing was written, try again later"
            )
        if where == "COMMIT" and self.conn.closed:
            # The connection went during COMMIT: the server may have made it durable just before.
            return commit_unknown(self.name, exc)
        if _machine_failure(exc):
            return _store_failed(self.name, "a read" if where == "a read" else "a write", exc)
        return None

    # -- the schema mark ------------------------------------------------------------------------------
    def _ensure_schema(self) -> None:
        mark, tables = self._schema_facts()
        if mark == (APPLICATION_ID, SCHEMA_VERSION):
            return
        self._refuse_foreign(mark, tables)
        with self._write() as conn:
            conn.execute(LOCK_SCHEMA_CREATION, {"key": APPLICATION_ID})
            mark, tables = self._schema_facts()  # another process may have won the race
            if mark == (APPLICATION_ID, SCHEMA_VERSION):
                return
            self._refuse_foreign(mark, tables)
            if mark is not None:  # an older version of the schema: upgraded in this transaction
                statements = self.sql.migration(mark[1]) or ()  # _refuse_foreign refused a version without one
                # No other writer (an older worker still running) between the copy and the drop,
                # and no statement timeout on a large table: the upgrade runs once.
                conn.execute(UPGRADE_LOCK)
                conn.execute(UPGRADE_NO_TIMEOUT)
                for statement in statements:
                    conn.execute(statement)
                conn.execute(UPDATE_SCHEMA_MARK, {"version": SCHEMA_VERSION})
                return
            for statement in (CREATE_SCHEMA_MARK, *self.sql.SCHEMA):
                conn.execute(statement)
            conn.execute(INSERT_SCHEMA_MARK, {"app": APPLICATION_ID, "version": SCHEMA_VERSION})

    def _schema_facts(self) -> tuple[tuple[int, int] | None, list[str]]:
        tables = [r[0] for r in self._read(SELECT_TABLES, {})]
        if "crashgate_schema" not in tables:
            return None, tables
        rows = self._read(SELECT_SCHEMA_MARK, {})
        return ((rows[0][0], rows[0][1]) if len(rows) == 1 else (0, 0)), tables

    def _refuse_foreign(self, mark: tuple[int, int] | None, tables: list[str]) -> None:
        if mark is not None and mark[0] == APPLICATION_ID and mark[1] > SCHEMA_VERSION:
            raise SchemaMismatch(
                f"database {self.name} has schema version {mark[1]}, newer than this engine's "
                f"{SCHEMA_VERSION}; upgrade crashgate to open it (the database was not modified)"
            )
        if mark is not None and mark[0] == APPLICATION_ID and mark[1] < SCHEMA_VERSION and self.sql.migration(mark[1]) is None:
            raise SchemaMismatch(f"database {self.name} is marked as crashgate's with schema version {mark[1]}, which no "
                                 "crashgate wrote; refusing to modify it (the database was not modified)")
        if (mark is not None and mark[0] != APPLICATION_ID) or (mark is None and tables):
            raise SchemaMismatch(
                f"database {self.name} was not created by crashgate (tables: {', '.join(tables)}); "
                "refusing to modify it: pass the URL of a new (empty) database or of an existing crashgate "
                "database, or select another schema with ?options=-csearch_path%3D<schema>"
            )

    def claim_plan(self) -> str:
        """The claim's query plan, as PostgreSQL reports it (tests check it uses ``job_due``)."""
        return " / ".join(row[0].strip() for row in self._read(CLAIM_PLAN, {}))


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise InvalidInput(
            "a postgresql:// database needs psycopg 3, which is not installed: pip install 'crashgate[postgres]'"
        ) from exc
    return psycopg


def _machine_failure(exc: Any) -> bool:
    """A failure of the server's machine or of the connection to it, not of the statement."""
    import psycopg

    if exc.sqlstate is None:
        return isinstance(exc, psycopg.OperationalError)  # the connection broke: no SQLSTATE
    return exc.sqlstate.startswith(FAILED_SQLSTATE_PREFIXES)


def _store_failed(name: str, where: str, exc: Any) -> StoreFailed:
    if _starting_up(exc):
        return StoreFailed(
            f"database {name}: {where} found the server starting up (or recovering, or shutting down): "
            f"{' '.join(str(exc).split())}; nothing of it was written (a worker backs off and tries again by itself)"
        )
    return StoreFailed(
        f"database {name}: {where} failed with {type(exc).__name__} ({exc.sqlstate or 'no SQLSTATE'}: "
        f"{str(exc).strip()}); nothing of it was written (a worker backs off and tries again by itself); "
        "check the server's disk and that it runs"
    )


def _starting_up(exc: Any) -> bool:
    """Whether ``exc`` says the server is starting up, recovering or shutting down (SQLSTATE
    57P03, cannot_connect_now; a refused connection carries it only in its text)."""
    text = str(exc)
    return getattr(exc, "sqlstate", None) == "57P03" or any(m in text for m in STARTING_UP_MESSAGES)


def _describe(conn: Any) -> str:
    """``'dbname' on host:port``: names the database in messages without its password."""
    info = conn.info
    return f"{info.dbname!r} on {info.host}:{info.port}"


def _safe(url: str) -> str:
    """The URL with any password replaced, quoted, for error messages."""
    return repr(_redact(url))


def _redact(url: str) -> str:
    text = PASSWORD_PARAMETER.sub(lambda m: m.group(1) + HIDDEN, url)
    scheme, sep, rest = text.partition("://")
    at = _userinfo_end(rest) if sep else -1
    if at < 0:
        return text
    userinfo = rest[:at]
    if ":" in userinfo:
        userinfo = f"{userinfo.split(':', 1)[0]}:{HIDDEN}"
    return f"{scheme}://{userinfo}{rest[at:]}"


def _userinfo_end(rest: str) -> int:
    """Where the userinfo of a URL's ``rest`` (after ``scheme://``) ends, its "@"; -1 if none.

    It is the last "@" before the first "/" or "?" that follows the first "@": a malformed URL's
    password may hold an unencoded "/", "?" or "@", and a query parameter may hold an "@" too.
    """
    first = rest.find("@")
    if first < 0:
        return -1
    ends = [i for i in (rest.find("/", first), rest.find("?", first)) if i >= 0]
    return rest.rfind("@", 0, min(ends) if ends else len(rest))


def _passwords(url: str) -> list[str]:
    """The password texts ``url`` holds (as written and percent-decoded), to scrub from a
    driver's message, which may quote the part of the URL it could not parse."""
    found = [m.group(2).strip("'") for m in PASSWORD_PARAMETER.finditer(url)]
    rest = url.partition("://")[2]
    userinfo = rest[:max(0, _userinfo_end(rest))]
    if ":" in userinfo:
        found.append(userinfo.split(":", 1)[1])
    secrets = [p for p in found if p]
    return sorted({*secrets, *(urllib.parse.unquote(p) for p in secrets)}, key=len, reverse=True)


def _reason(exc: Any, url: str) -> str:
    """The driver's message on one line, without any password of ``url``."""
    text = _redact(" ".join(str(exc).split()))
    for secret in _passwords(url):
        text = text.replace(secret, HIDDEN)
    return text
