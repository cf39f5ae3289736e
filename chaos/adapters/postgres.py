"""The reference engine on PostgreSQL, as the harness inspects it: PL/pgSQL audit triggers, a snapshot.

:class:`PostgresReferenceAdapter` is :class:`~chaos.ReferenceAdapter` with a PostgreSQL database
URL in place of a SQLite path. ``create`` installs the audit: two tables and two PL/pgSQL
triggers that record every state change of a job and every change to a memo row as it commits,
whatever the engine's code believes. ``inspect`` reads the same :class:`~chaos.Snapshot` the
SQLite adapter reads, so every invariant runs unchanged on either backend.

>>> adapter = adapter_for("postgresql://app@127.0.0.1/jobs")
>>> type(adapter).__name__
'PostgresReferenceAdapter'
>>> type(adapter_for("demo.db")).__name__
'ReferenceAdapter'
"""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
from typing import Any, Callable, TypeVar

from engine import PostgresStore

from chaos.adapter import JobView, OutboxView, Snapshot
from chaos.adapters.reference import HUMAN_WRITER, ReferenceAdapter, ReferenceSession
from chaos.adapters.sql import DAMAGED_SQL, SELECT_DAMAGED
from chaos.core.world import World

__all__ = [
    "PostgresReferenceAdapter",
    "PostgresSession",
    "adapter_for",
    "is_postgres",
    "AUDIT_SQL_PG",
    "WRITER_AUDIT_SQL_PG",
    "SET_WRITER",
    "connect_retrying",
    "RetryingReader",
    "RECONNECT_WAIT_S",
]

T = TypeVar("T")

AUDIT_SQL_PG = (
    DAMAGED_SQL,
    """CREATE TABLE IF NOT EXISTS chaos_transition (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, job_id TEXT, from_state TEXT, to_state TEXT)""",
    """CREATE TABLE IF NOT EXISTS chaos_memo_change (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, job_id TEXT, step TEXT, what TEXT)""",
    # A row trigger runs inside the writer's transaction, while it holds the job's row lock: the
    # audit rows of one job are numbered in the order its changes commit, and a rolled-back
    # change leaves no audit row.
    """CREATE OR REPLACE FUNCTION chaos_job_audit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO chaos_transition (job_id, from_state, to_state) VALUES (NEW.id, NULL, NEW.state);
        ELSIF TG_OP = 'UPDATE' THEN
            IF OLD.state IS DISTINCT FROM NEW.state THEN
                INSERT INTO chaos_transition (job_id, from_state, to_state) VALUES (NEW.id, OLD.state, NEW.state);
            END IF;
        ELSE
            INSERT INTO chaos_transition (job_id, from_state, to_state) VALUES (OLD.id, OLD.state, NULL);
        END IF;
        RETURN NULL;
    END $$""",
    """CREATE OR REPLACE FUNCTION chaos_memo_audit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO chaos_memo_change (job_id, step, what)
        VALUES (OLD.job_id, OLD.step, CASE WHEN TG_OP = 'UPDATE' THEN 'updated' ELSE 'deleted' END);
        RETURN NULL;
    END $$""",
    "DROP TRIGGER IF EXISTS chaos_job_audit ON job",
    """CREATE TRIGGER chaos_job_audit AFTER INSERT OR DELETE OR UPDATE OF state ON job
        FOR EACH ROW EXECUTE FUNCTION chaos_job_audit()""",
    "DROP TRIGGER IF EXISTS chaos_memo_audit ON step_result",
    """CREATE TRIGGER chaos_memo_audit AFTER UPDATE OR DELETE ON step_result
        FOR EACH ROW EXECUTE FUNCTION chaos_memo_audit()""",
)
# Installed only on the harness's scenario databases, as WRITER_AUDIT_SQL on SQLite: every write
# that touches a job is attributed to the session that made it. Each harness session sets
# ``crashgate.writer`` (a custom setting of its own connection); the trigger reads it back.
WRITER_AUDIT_SQL_PG = (
    """CREATE TABLE IF NOT EXISTS chaos_write (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, job_id TEXT, kind TEXT, writer TEXT, detail TEXT)""",
    """CREATE OR REPLACE FUNCTION chaos_writer() RETURNS text LANGUAGE sql STABLE AS $$
        SELECT current_setting('crashgate.writer', true) $$""",
    """CREATE OR REPLACE FUNCTION chaos_write_audit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_TABLE_NAME = 'job' THEN
            IF NEW.lease_token > OLD.lease_token THEN
                INSERT INTO chaos_write (job_id, kind, writer, detail) VALUES (NEW.id, 'claim', chaos_writer(), NEW.lease_token::text);
            END IF;
            IF OLD.state IS DISTINCT FROM NEW.state THEN
                INSERT INTO chaos_write (job_id, kind, writer, detail) VALUES (NEW.id, 'state', chaos_writer(), OLD.state || ' -> ' || NEW.state);
            END IF;
        ELSIF TG_TABLE_NAME = 'step_result' THEN
            INSERT INTO chaos_write (job_id, kind, writer, detail) VALUES (NEW.job_id, 'memo', chaos_writer(), NEW.step);
        ELSE
            INSERT INTO chaos_write (job_id, kind, writer, detail) VALUES (NEW.job_id, 'outbox', chaos_writer(), NEW.kind);
        END IF;
        RETURN NULL;
    END $$""",
    "DROP TRIGGER IF EXISTS chaos_w_job ON job",
    "CREATE TRIGGER chaos_w_job AFTER UPDATE ON job FOR EACH ROW EXECUTE FUNCTION chaos_write_audit()",
    "DROP TRIGGER IF EXISTS chaos_w_memo ON step_result",
    "CREATE TRIGGER chaos_w_memo AFTER INSERT ON step_result FOR EACH ROW EXECUTE FUNCTION chaos_write_audit()",
    "DROP TRIGGER IF EXISTS chaos_w_outbox ON outbox",
    "CREATE TRIGGER chaos_w_outbox AFTER INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION chaos_write_audit()",
)
SELECT_JOBS = ("SELECT id, state, payload, lease_owner, lease_until, next_run_at, last_error, result, lease_token "
               "FROM job LEFT JOIN job_payload ON job_payload.job_id = job.id")
SELECT_TRANSITIONS = "SELECT job_id, from_state, to_state FROM chaos_transition ORDER BY seq"
SELECT_MEMOS = "SELECT job_id, step, output, cost FROM step_result"
SELECT_MEMO_CHANGES = "SELECT job_id, step, what FROM chaos_memo_change ORDER BY seq"
SELECT_OUTBOX = "SELECT id, job_id, kind, sent_at, next_attempt_at FROM outbox ORDER BY id"
SELECT_HAS_WRITES = "SELECT to_regclass('chaos_write') IS NOT NULL"
SELECT_WRITES = "SELECT job_id, kind, writer, detail FROM chaos_write ORDER BY seq"
SET_WRITER = "SELECT set_config('crashgate.writer', %s, false)"
CONNECT_TIMEOUT_S = 10  # the first connection to a --db server; a server that does not answer by then is unreachable
# The session of the worker that runs while another is frozen: a lock it cannot get within the
# busy timeout makes its write give up (StoreBusy); any statement gives up after this long.
OTHER_STATEMENT_TIMEOUT_S = 5.0
# How long the harness's own connections wait for a server that went away (its backends
# terminated, a restart, "the database system is starting up") before they give up; the engine's
# workers ride out the same faults with their own backoff, and the harness must not die first.
RECONNECT_WAIT_S = 60.0
RECONNECT_DELAY_S_FIRST = 0.05
RECONNECT_DELAY_S_MAX = 1.0
_database_numbers = itertools.count()


def connect_retrying(url: str, *, wait_s: float = RECONNECT_WAIT_S) -> Any:
    """An autocommit connection to ``url``, trying again with backoff while the server is away.

    The URL was checked once before any process started, so a connection that fails now is a
    server restarting or recovering, not a wrong URL: waiting is right, up to ``wait_s``; then
    the last error is raised.
    """
    import psycopg

    deadline = time.monotonic() + wait_s
    delay_s = RECONNECT_DELAY_S_FIRST
    for _ in range(int(wait_s / RECONNECT_DELAY_S_FIRST) + 2):
        try:
            return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        except psycopg.OperationalError:
            if time.monotonic() + delay_s > deadline:
                raise
        time.sleep(delay_s)
        delay_s = min(RECONNECT_DELAY_S_MAX, delay_s * 2)
    raise AssertionError("connect_retrying: the deadline ends the loop first")  # a bug guard


class RetryingReader:
    """Reads on a connection of its own that is opened again when the server dropped it.

    A read in autocommit mode changes nothing, so one that failed with the connection may simply
    run again on a new one (:func:`connect_retrying`). ``read(fn)`` calls ``fn(conn)``.
    """

    def __init__(self, url: str, *, wait_s: float = RECONNECT_WAIT_S) -> None:
        self.url = url
        self.wait_s = wait_s
        self.conn: Any = None
        self.reconnects = 0

    def read(self, fn: Callable[[Any], T]) -> T:
        import psycopg

        for attempt in range(2):
            if self.conn is None or self.conn.closed:
                self.conn = connect_retrying(self.url, wait_s=self.wait_s)
            try:
                return fn(self.conn)
            except psycopg.OperationalError:
                self.close()
                self.reconnects += 1
                if attempt:
                    raise
        raise AssertionError("RetryingReader.read: the second attempt returns or raises")  # a bug guard

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # closing a connection the server already dropped
                pass


def is_postgres(db: str) -> bool:
    return db.startswith(("postgresql://", "postgres://"))


class PostgresSession(ReferenceSession):
    """A harness session on PostgreSQL: its writes are attributed through ``crashgate.writer``."""

    def __init__(self, adapter: "PostgresReferenceAdapter", db_path: str, world: World, *, worker_id: str, clock: Any, rng: random.Random) -> None:
        super().__init__(adapter, db_path, world, worker_id=worker_id, clock=clock, rng=rng)
        self._set_writer(worker_id)

    def _set_writer(self, writer: str) -> None:
        self.store.conn.execute(SET_WRITER, (writer,))

    def _as_human(self, action: Any) -> None:
        self._set_writer(HUMAN_WRITER)
        try:
            action()
        finally:
            self._set_writer(self.worker.worker_id)

    def set_busy_timeout(self, seconds: float) -> None:
        """How long this session's writes wait for a row lock another session holds (then
        StoreBusy), with a statement timeout as the backstop: a frozen peer never hangs it."""
        for name, value in (("lock_timeout", seconds), ("statement_timeout", max(seconds, OTHER_STATEMENT_TIMEOUT_S))):
            self.store.conn.execute("SELECT set_config(%s, %s, false)", (name, f"{round(value * 1000)}ms"))
        self.store.busy_timeout_s = seconds


class _Probe:
    """The probe's two reads on a connection of its own per process (opened on first use, so a
    forked child never shares its parent's socket)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._readers: dict[int, RetryingReader] = {}
        self.lock = threading.Lock()

    def __call__(self, job_id: str, step: str, worker_id: str, token: int, now: float) -> tuple[bool, bool]:
        from chaos.fleet.services import PG_PROBE_LEASE, PG_PROBE_MEMO, holds_lease

        def reads(conn: Any) -> tuple[Any, Any]:
            return conn.execute(PG_PROBE_MEMO, (job_id, step)).fetchone(), conn.execute(PG_PROBE_LEASE, (job_id,)).fetchone()

        with self.lock:
            reader = self._readers.setdefault(os.getpid(), RetryingReader(self.url))
            memo, lease = reader.read(reads)
        return memo is not None, holds_lease(lease, worker_id, token, now)

    def close(self) -> None:
        reader = self._readers.pop(os.getpid(), None)
        if reader is not None:
            reader.close()


class PostgresReferenceAdapter(ReferenceAdapter):
    """The reference engine on a PostgreSQL database; ``db_path`` arguments are URLs.

    Given a ``server`` URL (any database of a server whose user may create databases), it runs
    the crash matrix too: each scenario family builds a template database once (schema, audit
    triggers, setup state) and each scenario gets ``CREATE DATABASE ... TEMPLATE`` of it, dropped
    afterwards; the world's ledger stays a SQLite file in the scenario's directory.
    """

    name = "reference-postgresql"

    def __init__(self, server: str | None = None) -> None:
        super().__init__()
        self.server = server

    def use_database(self, url: str) -> None:
        """The server the matrix creates its scenario databases on (``--db``)."""
        if not is_postgres(url):
            raise ValueError(f"--db {url!r}: this target needs a postgresql:// URL")
        import psycopg
        import psycopg.conninfo

        try:
            password = psycopg.conninfo.conninfo_to_dict(url).get("password")
        except psycopg.Error:  # the text of a URL libpq cannot parse may quote any part of it: the password too
            raise ValueError("--db: not a PostgreSQL URL libpq can read; pass postgresql://user[:password]@host[:port]/dbname") from None
        try:  # once, before any family: a server that cannot be reached is the setting's fault, said in one line
            psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S).close()
        except psycopg.Error as exc:
            reason = " ".join(str(exc).split())
            if password:
                reason = reason.replace(str(password), "***")
            raise ValueError(f"--db: cannot connect to the PostgreSQL server ({reason}); check the URL and that the server runs") from None
        self.server = url

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_admin", None)
        return state

    def make_store(self, db_path: str) -> PostgresStore:
        return PostgresStore(db_path)

    def open(self, db_path: str, world: World, *, worker_id: str, clock: Any, rng: random.Random) -> PostgresSession:
        return PostgresSession(self, db_path, world, worker_id=worker_id, clock=clock, rng=rng)

    def create(self, db_path: str, *, attribute_writers: bool = False) -> None:
        """Create the engine's schema (if new) and install the audit tables and triggers (and,
        for the harness's own scenario databases, the writer attribution)."""
        store = self.make_store(db_path)
        try:
            with store.conn.transaction():
                for statement in AUDIT_SQL_PG + (WRITER_AUDIT_SQL_PG if attribute_writers else ()):
                    store.conn.execute(statement)
        finally:
            store.close()

    # -- scenario databases (the matrix) ---------------------------------------------------------
    def _admin_conn(self) -> Any:
        import psycopg

        if self.server is None:
            raise ValueError(f"{type(self).__name__} needs a PostgreSQL server for scenario databases: pass --db postgresql://... or --backend postgresql")
        admins = self.__dict__.setdefault("_admin", {})
        conn = admins.get(os.getpid())
        if conn is None or conn.closed:
            conn = admins[os.getpid()] = psycopg.connect(self.server, autocommit=True)
        return conn

    def _new_database(self, prefix: str, template: str) -> str:
        from psycopg import conninfo, sql

        name = f"{prefix}_{os.getpid()}_{next(_database_numbers)}"
        self._admin_conn().execute(sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(sql.Identifier(name), sql.Identifier(template)))
        return conninfo.make_conninfo(self.server, dbname=name) if "://" not in self.server else _with_dbname(self.server, name)

    def template_db(self, directory: str) -> str:
        """A new, empty database for a family's template (the harness creates its schema)."""
        return self._new_database("fam", "template0")

    def new_scenario_db(self, template: str, directory: str) -> str:
        """A fresh copy of a family's template database for one scenario."""
        return self._new_database("scen", _dbname(template))

    def copy_db(self, db_path: str, template: str, directory: str) -> str:
        """A copy of ``db_path`` while connections to it stay open (``CREATE DATABASE ... TEMPLATE``
        needs none): a new copy of ``template`` (its schema, empty) gets every table's rows, with
        triggers off so the audit rows are copied rather than written anew (the
        template's rows are replaced), and every sequence's
        position. For a random history's dry run of the iteration a kill is about to end."""
        import psycopg
        from psycopg import sql

        copy = self.new_scenario_db(template, directory)
        with psycopg.connect(db_path, autocommit=True) as src, psycopg.connect(copy, autocommit=True) as dst:
            with src.transaction(), dst.transaction():
                src.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                dst.execute("SET LOCAL session_replication_role = replica")
                tables = [r[0] for r in src.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename")]
                if tables:  # the template's own rows (its schema version) come from the source too
                    dst.execute(sql.SQL("TRUNCATE {}").format(sql.SQL(", ").join(map(sql.Identifier, tables))))
                for table in tables:
                    name = sql.Identifier(table)
                    with src.cursor().copy(sql.SQL("COPY {} TO STDOUT (FORMAT BINARY)").format(name)) as out:
                        with dst.cursor().copy(sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(name)) as into:
                            for data in out:
                                into.write(data)
                sequences = src.execute("SELECT schemaname, sequencename, last_value FROM pg_sequences WHERE schemaname = current_schema()").fetchall()
                for schema, sequence, last_value in sequences:
                    if last_value is not None:
                        dst.execute("SELECT setval(%s, %s, true)", (f"{schema}.{sequence}", last_value))
        return copy

    def drop_db(self, db_path: str) -> None:
        """Drop a scenario or template database (closing any connection still open to it)."""
        from psycopg import sql

        self._admin_conn().execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(_dbname(db_path))))

    def inspect(self, db_path: str) -> Snapshot:
        """Read the database on a connection of the harness's own, kept per process and database
        until :meth:`release`, in one read-only REPEATABLE READ transaction; a connection the
        server dropped (a restart, its backend terminated) is opened again, waiting for the server."""
        key = (os.getpid(), db_path)
        readers = self.__dict__.setdefault("_readers", {})
        reader = readers.get(key)
        if reader is None:
            reader = readers[key] = RetryingReader(db_path)
        return reader.read(self._snapshot)

    @staticmethod
    def _snapshot(conn: Any) -> Snapshot:
        # One snapshot for all the reads, so they agree with each other.
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            snap = Snapshot()
            for r in conn.execute(SELECT_JOBS):
                snap.jobs[r[0]] = JobView(*r[1:])
            snap.transitions = [tuple(r) for r in conn.execute(SELECT_TRANSITIONS)]  # type: ignore[misc]
            memos = conn.execute(SELECT_MEMOS).fetchall()
            snap.memos = {(r[0], r[1]): r[2] for r in memos}
            snap.memo_costs = {(r[0], r[1]): r[3] for r in memos}
            snap.memo_changes = [tuple(r) for r in conn.execute(SELECT_MEMO_CHANGES)]  # type: ignore[misc]
            snap.outbox = [OutboxView(*r) for r in conn.execute(SELECT_OUTBOX)]
            snap.damaged = dict(conn.execute(SELECT_DAMAGED).fetchall())
            if conn.execute(SELECT_HAS_WRITES).fetchone()[0]:
                snap.writes = [tuple(r) for r in conn.execute(SELECT_WRITES)]  # type: ignore[misc]
        return snap

    def release(self, db_path: str) -> None:
        """Close this process's inspection connection to ``db_path``."""
        reader = self.__dict__.get("_readers", {}).pop((os.getpid(), db_path), None)
        if reader is not None:
            reader.close()

    def probe(self, db_path: str) -> Any:
        return _Probe(db_path)


def _dbname(url: str) -> str:
    from psycopg import conninfo

    return conninfo.conninfo_to_dict(url)["dbname"]


def _with_dbname(url: str, name: str) -> str:
    """``url`` with its database replaced by ``name`` (query options kept)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def adapter_for(db: str) -> ReferenceAdapter:
    """The reference adapter for a SQLite path, or its PostgreSQL twin for a ``postgresql://`` URL."""
    return PostgresReferenceAdapter() if is_postgres(db) else ReferenceAdapter()
