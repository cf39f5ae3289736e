"""Storage on PostgreSQL: the same store as :class:`~engine.SqliteStore`, for workers on many machines.

Every public method has the signature and the meaning of its SQLite twin; one contract-test suite
runs against both. What differs is how the guarantees are obtained:

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
* **A killed worker's connection drops; the server rolls its open transaction back.**

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

import json
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Mapping

from ._commit import commit_unknown
from ._errors import IdempotencyConflict, InvalidInput, SchemaMismatch, StoreBusy, StoreFailed, UnknownJob
from ._inputs import finite_number as _finite_number
from ._inputs import storable_text as _storable_text
from ._store import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    Claim,
    Job,
    Memo,
    OutboxRow,
    _check_job_id,
    _clip_error,
    _job,
    _memo_output,
    _payload_json,
)

__all__ = ["PostgresStore"]

SUBMIT_BATCH_MAX = 1000  # rows per INSERT statement in submit_many (all in one transaction)
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

SCHEMA = (
    """CREATE TABLE crashgate_schema (
        one            BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one), -- exactly one row
        application_id BIGINT NOT NULL,
        version        INTEGER NOT NULL
    )""",
    """CREATE TABLE job (
        id          TEXT COLLATE "C" PRIMARY KEY, -- the caller's idempotency key
        workflow    TEXT NOT NULL,
        state       TEXT COLLATE "C" NOT NULL,
        payload     TEXT NOT NULL,                -- canonical JSON, compared as text on resubmit
        result      TEXT,
        attempts    INTEGER NOT NULL DEFAULT 0,
        next_run_at DOUBLE PRECISION,             -- NULL = not claimable
        lease_until DOUBLE PRECISION,
        lease_owner TEXT,
        lease_token BIGINT NOT NULL DEFAULT 0,    -- fencing token: grows with every claim
        last_error  TEXT COLLATE "C",
        created     DOUBLE PRECISION NOT NULL,
        updated     DOUBLE PRECISION NOT NULL
    )""",
    # As on SQLite: finished and parked jobs are not in this partial index, so the claim reads one
    # entry whatever the backlog or the number of finished jobs.
    "CREATE INDEX job_due ON job (next_run_at) WHERE next_run_at IS NOT NULL",
    """CREATE TABLE step_result (
        job_id TEXT COLLATE "C" NOT NULL,
        step   TEXT COLLATE "C" NOT NULL,
        output TEXT NOT NULL,
        cost   DOUBLE PRECISION NOT NULL DEFAULT 0,
        at     DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (job_id, step)
    )""",
    """CREATE TABLE outbox (
        id              BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        job_id          TEXT COLLATE "C" NOT NULL,
        kind            TEXT COLLATE "C" NOT NULL,
        payload         TEXT NOT NULL,
        created         DOUBLE PRECISION NOT NULL,
        sent_at         DOUBLE PRECISION,
        attempts        INTEGER NOT NULL DEFAULT 0,
        next_attempt_at DOUBLE PRECISION NOT NULL,
        last_error      TEXT,
        UNIQUE (job_id, kind)
    )""",
    "CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE sent_at IS NULL",
)
INSERT_SCHEMA_MARK = "INSERT INTO crashgate_schema (application_id, version) VALUES (%(app)s, %(version)s)"
SELECT_SCHEMA_MARK = "SELECT application_id, version FROM crashgate_schema"
SELECT_TABLES = (
    "SELECT table_name FROM information_schema.tables "
    "WHERE table_schema = current_schema() ORDER BY table_name"
)
# Serialises schema creation between processes opening a new database at the same moment.
LOCK_SCHEMA_CREATION = "SELECT pg_advisory_xact_lock(%(key)s)"
SET_CONFIG = "SELECT set_config(%(name)s, %(value)s, false)"

SELECT_JOB = "SELECT * FROM job WHERE id = %(id)s"
SELECT_JOBS = "SELECT * FROM job ORDER BY created, id"
SELECT_JOBS_BY_ID = "SELECT * FROM job WHERE id = ANY(%(ids)s)"
SELECT_PAYLOADS = "SELECT id, payload FROM job WHERE id = ANY(%(ids)s)"
# ON CONFLICT DO NOTHING waits for a concurrent insert of the same id to commit or roll back, so
# the payload comparison that follows always sees the winner's row.
INSERT_JOBS = (
    "INSERT INTO job (id, workflow, state, payload, attempts, next_run_at, created, updated) "
    "SELECT i, %(workflow)s, 'pending', p, 0, %(now)s, %(now)s, %(now)s "
    "FROM unnest(%(ids)s::text[], %(payloads)s::text[]) AS t(i, p) "
    "ON CONFLICT (id) DO NOTHING"
)
# The subquery locks the most overdue claimable row, skipping rows other transactions hold (and,
# under READ COMMITTED, re-checking "still due" on the row's newest version as it locks it); the
# outer UPDATE leases that row by primary key while the lock is held: no window between pick and
# lease. A second "still due" test in the outer WHERE would be redundant, and it tempts the planner
# to walk job_due instead of the primary key.
CLAIM = (
    "UPDATE job SET lease_owner = %(owner)s, lease_until = %(until)s, next_run_at = %(until)s, "
    "lease_token = lease_token + 1, updated = %(now)s "
    "WHERE id = (SELECT id FROM job WHERE next_run_at <= %(now)s ORDER BY next_run_at LIMIT 1 FOR UPDATE SKIP LOCKED) "
    "RETURNING id, state, payload, attempts, lease_token"
)
CLAIM_PLAN = (
    "EXPLAIN (COSTS OFF) SELECT id FROM job WHERE next_run_at <= 0 ORDER BY next_run_at LIMIT 1 "
    "FOR UPDATE SKIP LOCKED"
)
FENCED_MOVE = (
    "UPDATE job SET state = %(to)s, updated = %(now)s "
    "WHERE id = %(id)s AND state = %(from)s AND lease_token = %(token)s"
)
COUNT_RECLAIM = (
    "UPDATE job SET attempts = attempts + 1, updated = %(now)s "
    "WHERE id = %(id)s AND state = %(state)s AND lease_token = %(token)s"
)
COMPLETE_KEEP_LEASE = (
    "UPDATE job SET state = %(to)s, attempts = 0, last_error = NULL, lease_until = %(until)s, "
    "next_run_at = %(until)s, updated = %(now)s "
    "WHERE id = %(id)s AND state = %(from)s AND lease_token = %(token)s"
)
COMPLETE_RELEASE = (
    "UPDATE job SET state = %(to)s, attempts = 0, last_error = NULL, result = %(result)s, "
    "next_run_at = %(next_run_at)s, lease_owner = NULL, lease_until = NULL, updated = %(now)s "
    "WHERE id = %(id)s AND state = %(from)s AND lease_token = %(token)s"
)
# A plain INSERT, as on SQLite: a second memo row for a step is a bug and must fail loudly.
INSERT_MEMO = (
    "INSERT INTO step_result (job_id, step, output, cost, at) "
    "VALUES (%(id)s, %(step)s, %(output)s, %(cost)s, %(now)s)"
)
INSERT_OUTBOX = (
    "INSERT INTO outbox (job_id, kind, payload, created, next_attempt_at) "
    "VALUES (%(id)s, %(kind)s, %(payload)s, %(now)s, %(now)s) ON CONFLICT (job_id, kind) DO NOTHING"
)
PARK = (
    "UPDATE job SET state = %(to)s, attempts = %(attempts)s, last_error = %(error)s, "
    "next_run_at = %(next_run_at)s, lease_owner = NULL, lease_until = NULL, updated = %(now)s "
    "WHERE id = %(id)s AND state = %(from)s AND lease_token = %(token)s"
)
HEARTBEAT = (
    "UPDATE job SET lease_until = %(until)s, next_run_at = %(until)s, updated = %(now)s "
    "WHERE id = %(id)s AND state = %(state)s AND lease_token = %(token)s"
)
HUMAN_MOVE = (
    "UPDATE job SET state = %(to)s, attempts = 0, next_run_at = %(next_run_at)s, lease_owner = NULL, "
    "lease_until = NULL, updated = %(now)s WHERE id = %(id)s AND state = %(from)s"
)
SELECT_MEMO = "SELECT output, cost, at FROM step_result WHERE job_id = %(id)s AND step = %(step)s"
SELECT_MEMOS = "SELECT step, output FROM step_result WHERE job_id = %(id)s"
SELECT_DUE_OUTBOX = (
    "SELECT id, job_id, kind, payload, attempts FROM outbox "
    "WHERE sent_at IS NULL AND next_attempt_at <= %(now)s ORDER BY next_attempt_at LIMIT %(limit)s"
)
# Rows are locked in id order, so two senders marking overlapping batches cannot deadlock.
MARK_SENT = (
    "UPDATE outbox SET sent_at = %(now)s, attempts = attempts + 1 "
    "WHERE id IN (SELECT id FROM outbox WHERE id = ANY(%(ids)s) AND sent_at IS NULL ORDER BY id FOR UPDATE) "
    "AND sent_at IS NULL"
)
MARK_SEND_FAILED = (
    "UPDATE outbox SET attempts = attempts + 1, next_attempt_at = %(next_at)s, last_error = %(error)s "
    "WHERE id = %(id)s AND sent_at IS NULL"
)


class PostgresStore:
    """The engine's database on PostgreSQL: one connection per process, opened after any ``fork``.

    ``busy_timeout_s`` is how long a write waits for a row lock before it gives up with
    :class:`~engine.StoreBusy` (PostgreSQL's ``lock_timeout``), as on SQLite.
    """

    backend = "postgresql"

    def __init__(
        self,
        url: str,
        *,
        busy_timeout_s: float = 5.0,
        statement_timeout_s: float = STATEMENT_TIMEOUT_S_DEFAULT,
        idle_in_transaction_timeout_s: float = IDLE_IN_TRANSACTION_TIMEOUT_S_DEFAULT,
        workflow: str = "reference",
    ) -> None:
        for name, value in (("busy_timeout_s", busy_timeout_s), ("statement_timeout_s", statement_timeout_s),
                            ("idle_in_transaction_timeout_s", idle_in_transaction_timeout_s)):
            if not value > 0:
                raise InvalidInput(f"{name}={value!r} must be > 0 seconds")
        psycopg = _import_psycopg()
        self.url = url
        self.workflow = workflow
        self.busy_timeout_s = busy_timeout_s
        self._timeouts_s = (("lock_timeout", busy_timeout_s), ("statement_timeout", statement_timeout_s),
                            ("idle_in_transaction_session_timeout", idle_in_transaction_timeout_s))
        try:
            self.conn = self._connect()
        except psycopg.OperationalError as exc:
            raise InvalidInput(f"cannot connect to {_safe(url)}: {str(exc).strip()}; check the database URL and that the server runs") from exc
        self.name = _describe(self.conn)
        self._ensure_schema()

    def _connect(self) -> Any:
        import psycopg

        conn = psycopg.connect(self.url, autocommit=True)
        for setting, seconds in self._timeouts_s:
            conn.execute(SET_CONFIG, {"name": setting, "value": f"{round(seconds * 1000)}ms"})
        return conn

    def _reconnect_if_lost(self) -> None:
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

    # -- connection and schema ----------------------------------------------------------------
    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def _write(self) -> Iterator[Any]:
        """The one write path: BEGIN, commit on success, roll back on any exception."""
        self._reconnect_if_lost()
        at_commit = False  # set once the body returned: a failure after it is a failure of COMMIT
        try:
            with self.conn.transaction():
                yield self.conn
                at_commit = True
        except _psycopg_error() as exc:
            if exc.sqlstate in BUSY_SQLSTATES:
                raise StoreBusy(
                    f"database {self.name}: {type(exc).__name__} ({exc.sqlstate}) within {self.busy_timeout_s}s; "
                    "another transaction holds the rows this write needs; nothing was written, try again later"
                ) from exc
            if at_commit and self.conn.closed:
                raise commit_unknown(self.name, exc) from exc
            if _machine_failure(exc):
                raise _store_failed(self.name, "a write", exc) from exc
            raise

    def _rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Run one read (its own short transaction, autocommit) and return its rows as dicts."""
        from psycopg.rows import dict_row

        self._reconnect_if_lost()
        try:
            with self.conn.cursor(row_factory=dict_row) as cur:
                cur.execute(sql, params)
                return cur.fetchall()
        except _psycopg_error() as exc:
            if exc.sqlstate in BUSY_SQLSTATES:
                raise StoreBusy(f"database {self.name}: read timed out ({exc.sqlstate}); try again later") from exc
            if _machine_failure(exc):
                raise _store_failed(self.name, "a read", exc) from exc
            raise

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
            for statement in SCHEMA:
                conn.execute(statement)
            conn.execute(INSERT_SCHEMA_MARK, {"app": APPLICATION_ID, "version": SCHEMA_VERSION})

    def _schema_facts(self) -> tuple[tuple[int, int] | None, list[str]]:
        tables = [r["table_name"] for r in self._rows(SELECT_TABLES)]
        if "crashgate_schema" not in tables:
            return None, tables
        rows = self._rows(SELECT_SCHEMA_MARK)
        return ((rows[0]["application_id"], rows[0]["version"]) if len(rows) == 1 else (0, 0)), tables

    def _refuse_foreign(self, mark: tuple[int, int] | None, tables: list[str]) -> None:
        if mark is not None and mark[0] == APPLICATION_ID and mark[1] > SCHEMA_VERSION:
            raise SchemaMismatch(
                f"database {self.name} has schema version {mark[1]}, newer than this engine's "
                f"{SCHEMA_VERSION}; upgrade crashgate to open it (the database was not modified)"
            )
        if (mark is not None and mark[0] != APPLICATION_ID) or (mark is None and tables):
            raise SchemaMismatch(
                f"database {self.name} was not created by crashgate (tables: {', '.join(tables)}); "
                "refusing to modify it: pass the URL of a new (empty) database or of an existing crashgate "
                "database, or select another schema with ?options=-csearch_path%3D<schema>"
            )

    def claim_plan(self) -> str:
        """The claim's query plan, as PostgreSQL reports it (tests check it uses ``job_due``)."""
        return " / ".join(row["QUERY PLAN"].strip() for row in self._rows(CLAIM_PLAN))

    # -- submit -------------------------------------------------------------------------------
    def submit(self, job_id: str, payload: Any, *, now: float) -> Job:
        """Create a job, or return the existing one if ``job_id`` was submitted with this payload."""
        return self.submit_many([(job_id, payload)], now=now)[0]

    def submit_many(self, items: Iterable[tuple[str, Any]], *, now: float) -> list[Job]:
        """Submit many jobs in one transaction: all are stored, or (on any error) none."""
        _finite_number("now", now)
        rows = [(_check_job_id(job_id), _payload_json(job_id, payload)) for job_id, payload in items]
        ids = list(dict.fromkeys(job_id for job_id, _ in rows))
        with self._write() as conn:
            for start in range(0, len(rows), SUBMIT_BATCH_MAX):
                batch = rows[start : start + SUBMIT_BATCH_MAX]
                conn.execute(
                    INSERT_JOBS,
                    {"workflow": self.workflow, "now": now, "ids": [r[0] for r in batch], "payloads": [r[1] for r in batch]},
                )
            stored = {r[0]: r[1] for r in conn.execute(SELECT_PAYLOADS, {"ids": ids})}
            for job_id, payload_json in rows:  # in submission order, so the first conflict is named
                if stored[job_id] != payload_json:
                    raise IdempotencyConflict(job_id, stored[job_id], payload_json)
        by_id = {row["id"]: _job(row) for row in self._rows(SELECT_JOBS_BY_ID, {"ids": ids})}
        return [by_id[job_id] for job_id, _ in rows]

    def get(self, job_id: str) -> Job:
        if not _storable_text(job_id):  # no job can have this id; both backends answer alike
            raise UnknownJob(job_id)
        rows = self._rows(SELECT_JOB, {"id": job_id})
        if not rows:
            raise UnknownJob(job_id)
        return _job(rows[0])

    def jobs(self) -> list[Job]:
        return [_job(r) for r in self._rows(SELECT_JOBS)]

    # -- the worker's writes --------------------------------------------------------------------
    def claim(self, owner: str, *, now: float, lease_s: float, starts: Mapping[str, str]) -> Claim | None:
        """Lease the most overdue claimable job and start its step, in ONE write transaction.

        The same contract as :meth:`engine.SqliteStore.claim`: a ready job moves to the working
        state ``starts`` names; a working job whose lease expired stays there and is charged one
        attempt.
        """
        with self._write() as conn:
            row = conn.execute(CLAIM, {"owner": owner, "until": now + lease_s, "now": now}).fetchone()
            if row is None:
                return None
            job_id, state, payload, attempts, token = row
            working = starts.get(state)
            ident = {"id": job_id, "token": token, "now": now}
            if working is not None:
                moved = conn.execute(FENCED_MOVE, {**ident, "to": working, "from": state}).rowcount
                state = working
            else:
                moved = conn.execute(COUNT_RECLAIM, {**ident, "state": state}).rowcount
                attempts += 1
            if moved != 1:
                raise AssertionError(f"job {job_id!r} changed under its own row lock")
            return Claim(job_id, state, payload, attempts, token, now + lease_s)

    def complete(
        self,
        claim: Claim,
        *,
        step: str,
        from_state: str,
        done_state: str,
        output_json: str,
        cost_usd: float,
        effects: Mapping[str, str],
        next_state: str | None,
        release_at: float | None,
        lease_until: float,
        result_json: str | None,
        write_memo: bool,
        now: float,
    ) -> bool:
        """Commit a step's memo, its outbox rows and the state advance as ONE fenced transaction.

        The same contract as :meth:`engine.SqliteStore.complete`; False, having written nothing,
        if the lease was taken over.
        """
        ident = {"id": claim.job_id, "token": claim.token, "now": now}
        with self._write() as conn:
            if next_state is None:
                moved = conn.execute(
                    COMPLETE_RELEASE,
                    {**ident, "to": done_state, "from": from_state, "result": result_json, "next_run_at": release_at},
                ).rowcount
            else:
                moved = conn.execute(
                    COMPLETE_KEEP_LEASE, {**ident, "to": done_state, "from": from_state, "until": lease_until}
                ).rowcount
            if moved != 1:
                return False
            if write_memo:
                conn.execute(INSERT_MEMO, {"id": claim.job_id, "step": step, "output": output_json, "cost": cost_usd, "now": now})
            for kind, payload_json in effects.items():
                conn.execute(INSERT_OUTBOX, {"id": claim.job_id, "kind": kind, "payload": payload_json, "now": now})
            if next_state is not None:
                moved = conn.execute(FENCED_MOVE, {**ident, "to": next_state, "from": done_state}).rowcount
                if moved != 1:
                    raise AssertionError(f"job {claim.job_id!r} changed under its own row lock")
        return True

    def park(
        self,
        claim: Claim,
        *,
        from_state: str,
        to_state: str,
        attempts: int,
        error: str | None,
        next_run_at: float | None,
        now: float,
    ) -> bool:
        """Leave the working state without a result (retry edge, failed state or needs_human)."""
        params = {
            "id": claim.job_id,
            "token": claim.token,
            "from": from_state,
            "to": to_state,
            "attempts": attempts,
            "error": _clip_error(error),
            "next_run_at": next_run_at,
            "now": now,
        }
        with self._write() as conn:
            moved = conn.execute(PARK, params).rowcount
        return moved == 1

    def heartbeat(self, claim: Claim, *, state: str, until: float, now: float) -> bool:
        """Extend the lease; False means it was taken over and the worker must stop."""
        with self._write() as conn:
            changed = conn.execute(
                HEARTBEAT, {"until": until, "now": now, "id": claim.job_id, "state": state, "token": claim.token}
            ).rowcount
        return changed == 1

    def human_move(self, job_id: str, *, from_state: str, to_state: str, next_run_at: float | None, now: float) -> bool:
        """A human operation: a compare-and-swap on the state, not fenced by any lease."""
        with self._write() as conn:
            moved = conn.execute(
                HUMAN_MOVE, {"id": job_id, "from": from_state, "to": to_state, "next_run_at": next_run_at, "now": now}
            ).rowcount
        return moved == 1

    # -- the memo --------------------------------------------------------------------------------
    def memo(self, job_id: str, step: str) -> Memo | None:
        rows = self._rows(SELECT_MEMO, {"id": job_id, "step": step})
        if not rows:
            return None
        return Memo(_memo_output(job_id, step, rows[0]["output"]), rows[0]["cost"], rows[0]["at"])

    def memos(self, job_id: str) -> dict[str, Any]:
        return {r["step"]: _memo_output(job_id, r["step"], r["output"]) for r in self._rows(SELECT_MEMOS, {"id": job_id})}

    # -- the outbox ------------------------------------------------------------------------------
    def due_outbox(self, *, now: float, limit: int) -> list[OutboxRow]:
        return [
            OutboxRow(r["id"], r["job_id"], r["kind"], json.loads(r["payload"]), r["attempts"])
            for r in self._rows(SELECT_DUE_OUTBOX, {"now": now, "limit": limit})
        ]

    def mark_sent(self, ids: list[int], *, now: float) -> int:
        """Mark delivered rows; only ever called after the sender confirmed each delivery."""
        if not ids:
            return 0
        with self._write() as conn:
            return conn.execute(MARK_SENT, {"now": now, "ids": list(ids)}).rowcount

    def mark_send_failed(self, row_id: int, *, error: str, next_at: float) -> None:
        with self._write() as conn:
            conn.execute(MARK_SEND_FAILED, {"id": row_id, "error": _clip_error(error), "next_at": next_at})


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise InvalidInput(
            "a postgresql:// database needs psycopg 3, which is not installed: pip install 'crashgate[postgres]'"
        ) from exc
    return psycopg


def _psycopg_error() -> type[BaseException]:
    import psycopg

    return psycopg.Error


def _machine_failure(exc: Any) -> bool:
    """A failure of the server's machine or of the connection to it, not of the statement."""
    import psycopg

    if exc.sqlstate is None:
        return isinstance(exc, psycopg.OperationalError)  # the connection broke: no SQLSTATE
    return exc.sqlstate.startswith(FAILED_SQLSTATE_PREFIXES)


def _store_failed(name: str, where: str, exc: Any) -> StoreFailed:
    return StoreFailed(
        f"database {name}: {where} failed with {type(exc).__name__} ({exc.sqlstate or 'no SQLSTATE'}: "
        f"{str(exc).strip()}); nothing of it was written and the worker backs off and tries again; "
        "if this persists, check the server's disk and that it runs"
    )


def _describe(conn: Any) -> str:
    """``'dbname' on host:port``: names the database in messages without its password."""
    info = conn.info
    return f"{info.dbname!r} on {info.host}:{info.port}"


def _safe(url: str) -> str:
    """The URL with any password replaced, for error messages."""
    head, at, tail = url.rpartition("@")
    if not at or ":" not in head.split("://", 1)[-1]:
        return repr(url)
    scheme, _, userinfo = head.partition("://")
    return repr(f"{scheme}://{userinfo.split(':', 1)[0]}:***@{tail}")
