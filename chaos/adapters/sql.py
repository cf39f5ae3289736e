"""Declarative helpers for engines on SQLite: name the tables and columns, get the audit and the snapshot.

An engine that keeps its jobs, memo rows and outbox in SQL tables need not write a line of the
harness's SQL. Declare where things are (:class:`JobTable`, :class:`MemoTable`,
:class:`OutboxTable`, together a :class:`SqlSchema`) and the schema gives:

- the audit triggers (every state change, every change to a memo row, recorded as it commits,
  whatever the engine's code believes) and, for the harness's own scenario databases, the writer
  attribution (which worker made each claim, state change, memo row and outbox row);
- the :class:`~chaos.adapter.Snapshot` read on a connection of the harness's own;
- the probe a paid call is classified with (is the step's memo committed; does the caller hold
  the lease, by owner and expiry, and by token where the engine has one).

:class:`SqliteAdapter` puts that together with a declared state table: a subclass names its
``schema``, its states (``table``, ``steps``, ``final``, ``parked``) and writes ``create_schema``
and ``open``. A lease token is optional (a claim is then seen as a change of ``lease_owner``);
so are ``next_run_at``, ``last_error``, ``result`` and the outbox's own effect key.

>>> schema = SqlSchema(JobTable(name="task"), MemoTable(name="memo"), outbox=None)
>>> [s.split()[5] for s in schema.audit_sql(attribute_writers=True) if s.startswith("CREATE TRIGGER")]
['chaos_job_insert', 'chaos_job_state', 'chaos_job_delete', 'chaos_memo_update', 'chaos_memo_delete', 'chaos_w_claim', 'chaos_w_state', 'chaos_w_memo']
"""

from __future__ import annotations

import inspect
import os
import sqlite3
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from chaos.adapter import JobView, OutboxView, Snapshot
from chaos.core.models import CreateWith, create_with_model
from chaos.core.pool import harness_connect
from chaos.core.process import ChildFailed, run_in_child
from chaos.core.thread_connections import ThreadConnections

__all__ = ["JobTable", "MemoTable", "OutboxTable", "SqlSchema", "SqlProbe", "SqliteAdapter", "HUMAN_WRITER", "DAMAGED_SQL", "SELECT_DAMAGED",
           "CreateWith", "creates_from_path", "make_tables"]

HUMAN_WRITER = "human"  # the writer a person's action is attributed to (never a fenced-writes finding)
# The states the harness itself gave a job, as a family's premise (SqlSchema.overwrite, unaudited):
# read into Snapshot.damaged. The same statements on SQLite and PostgreSQL.
DAMAGED_SQL = "CREATE TABLE IF NOT EXISTS chaos_damaged_state (job_id TEXT, state TEXT)"
SELECT_DAMAGED = "SELECT job_id, state FROM chaos_damaged_state"


def creates_from_path(adapter: Any) -> bool:
    """Whether ``adapter`` declares ``create_with = "path"`` (:class:`CreateWith`, a model of :mod:`chaos.core.models`)."""
    return create_with_model(adapter) is CreateWith.PATH


def make_tables(adapter: Any, db_path: str) -> None:
    """``adapter.create_schema(db_path)`` in a child process of its own: an engine that opens its
    database itself may leave threads, pools or module state behind, which must never be in the
    harness's process (every scenario's processes are forked from it) nor in the one that goes on
    to install the audit. A failure raises :class:`~chaos.core.process.ChildFailed` with its traceback."""
    run_in_child(lambda: adapter.create_schema(db_path), what="the adapter's create_schema")


def _ident(name: str) -> str:
    if not name.replace("_", "a").isalnum() or name[0].isdigit():
        raise ValueError(f"table or column name {name!r} is not a plain SQL identifier (letters, digits, _)")
    return f'"{name}"'


def _col(name: str | None) -> str:
    return "NULL" if name is None else _ident(name)


@dataclass(frozen=True)
class JobTable:
    """Where the jobs are. ``token``: the lease's fencing token, if the engine has one (None: no token).

    ``payload_table``: a table of its own that holds the payload (column ``payload``), one row
    per job keyed by ``payload_job_id``, where the engine keeps it out of the job's row (None:
    ``payload`` is a column of this table).
    """

    name: str = "job"
    id: str = "id"
    state: str = "state"
    payload: str = "payload"
    payload_table: str | None = None
    payload_job_id: str = "job_id"
    lease_owner: str = "lease_owner"
    lease_until: str | None = "lease_until"
    token: str | None = None
    next_run_at: str | None = "next_run_at"
    last_error: str | None = "last_error"
    result: str | None = "result"


@dataclass(frozen=True)
class MemoTable:
    """Where a finished step's output is kept, one row per (job, step). ``cost``: the column
    recording what the step's call cost (None: the engine records none; the default name on a
    table without that column counts as None)."""

    name: str = "step_result"
    job_id: str = "job_id"
    step: str = "step"
    output: str = "output"
    cost: str | None = "cost"


def _cost_column(conn: sqlite3.Connection, memo: MemoTable) -> str | None:
    """The memo table's cost column, or None where there is none to read: the default name on a
    table without it is an engine that records no cost; a name declared otherwise must exist
    (SQLite would read a double-quoted name it does not know as a text, the same for every row)."""
    if memo.cost is None:
        return None
    columns = {row[1] for row in conn.execute(f"PRAGMA table_info({_ident(memo.name)})")}
    if memo.cost in columns:
        return memo.cost
    if memo.cost == MemoTable.cost:
        return None
    raise ValueError(f"MemoTable(cost={memo.cost!r}): table {memo.name!r} has no such column (it has {', '.join(sorted(columns))}); "
                     "name its cost column, or give cost=None if the engine records none")


@dataclass(frozen=True)
class OutboxTable:
    """Where effects wait to be sent. ``key``: a column holding the effect's idempotency key, if
    the engine sends its own (None: the harness expects ``<job_id>:<kind>``)."""

    name: str = "outbox"
    id: str = "id"
    job_id: str = "job_id"
    kind: str = "kind"
    sent_at: str = "sent_at"
    next_attempt_at: str | None = None
    key: str | None = None


SELECT_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
# The fields a declaration may set to None: the engine keeps no such column.
_OPTIONAL_FIELDS = frozenset({"lease_until", "token", "next_run_at", "last_error", "result", "cost", "next_attempt_at", "key"})


def _without_rowid(conn: sqlite3.Connection, table: str) -> bool:
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
    return bool(sql and sql[0] and "WITHOUT ROWID" in " ".join(sql[0].upper().split()))


@dataclass(frozen=True)
class SqlSchema:
    """An engine's tables as the harness reads them (no memo table or outbox: give None)."""

    job: JobTable = field(default_factory=JobTable)
    memo: MemoTable | None = field(default_factory=MemoTable)
    outbox: OutboxTable | None = field(default_factory=OutboxTable)

    def check(self, conn: sqlite3.Connection) -> None:
        """Raise :class:`ValueError` naming every table and column this declaration names that the
        engine's schema on ``conn`` does not have, and the fix. SQLite reads a double-quoted name it
        does not know as a text, the same for every row, so a misspelt column would be read as a
        constant (a result that never differs between runs, a lease always held) instead of failing.
        """
        wanted: list[tuple[str, str, str]] = []  # (table, column, the declaration's field)
        j, m, o = self.job, self.memo, self.outbox
        job_columns = [("id", j.id), ("state", j.state), ("lease_owner", j.lease_owner), ("lease_until", j.lease_until),
                       ("token", j.token), ("next_run_at", j.next_run_at), ("last_error", j.last_error), ("result", j.result)]
        wanted += [(j.name, column, f"JobTable({key}=...)") for key, column in job_columns if column is not None]
        if j.payload_table is None:
            wanted.append((j.name, j.payload, "JobTable(payload=...)"))
        else:
            wanted += [(j.payload_table, j.payload, "JobTable(payload=...)"), (j.payload_table, j.payload_job_id, "JobTable(payload_job_id=...)")]
        if m is not None:
            wanted += [(m.name, column, f"MemoTable({key}=...)") for key, column in (("job_id", m.job_id), ("step", m.step), ("output", m.output))]
            if m.cost is not None and m.cost != MemoTable.cost:  # the default name on a table without it: no cost recorded
                wanted.append((m.name, m.cost, "MemoTable(cost=...)"))
        if o is not None:
            wanted += [(o.name, column, f"OutboxTable({key}=...)") for key, column in
                       (("id", o.id), ("job_id", o.job_id), ("kind", o.kind), ("sent_at", o.sent_at),
                        ("next_attempt_at", o.next_attempt_at), ("key", o.key)) if column is not None]
        columns: dict[str, list[str]] = {}  # table -> its columns (table_xinfo: generated and hidden ones too)
        accepted: dict[str, set[str]] = {}  # ... lower case (SQLite's names are not case-sensitive), rowid's names too
        problems: list[str] = []
        for table, column, declared in wanted:
            if table not in columns:
                columns[table] = [row[1] for row in conn.execute(f"PRAGMA table_xinfo({_ident(table)})")]
                accepted[table] = {name.lower() for name in columns[table]}
                if not columns[table]:
                    have = ", ".join(r[0] for r in conn.execute(SELECT_TABLES)) or "none"
                    named_by = "JobTable(payload_table=...)" if table == j.payload_table and table != j.name else f"{declared.split('(')[0]}(name=...)"
                    problems.append(f"table {table!r} does not exist (named by {named_by}; the tables: {have})")
                elif not _without_rowid(conn, table):
                    accepted[table] |= {"rowid", "oid", "_rowid_"}
            if columns[table] and column.lower() not in accepted[table]:
                optional = declared.split("(")[1].split("=")[0] in _OPTIONAL_FIELDS
                problems.append(f"table {table!r} has no column {column!r} ({declared}"
                                + (", or None if the engine keeps none" if optional else "") + f"; it has {', '.join(sorted(columns[table]))})")
        if problems:
            raise ValueError("the adapter's schema does not match the tables create_schema made: " + "; ".join(dict.fromkeys(problems))
                             + ": name the engine's own tables and columns in SqlSchema(JobTable(...), MemoTable(...), OutboxTable(...))")

    def audit_sql(self, *, attribute_writers: bool = False) -> list[str]:
        """The harness's audit tables and triggers (writer attribution needs ``chaos_writer()``
        registered on every connection that writes: the harness does it for a session that
        offers ``connection()``)."""
        j, m, o = self.job, self.memo, self.outbox
        jt, jid, js = _ident(j.name), _ident(j.id), _ident(j.state)
        out = [
            "CREATE TABLE IF NOT EXISTS chaos_transition (seq INTEGER PRIMARY KEY, job_id TEXT, from_state TEXT, to_state TEXT)",
            "CREATE TABLE IF NOT EXISTS chaos_memo_change (seq INTEGER PRIMARY KEY, job_id TEXT, step TEXT, what TEXT)",
            DAMAGED_SQL,
            f"""CREATE TRIGGER IF NOT EXISTS chaos_job_insert AFTER INSERT ON {jt} BEGIN
        INSERT INTO chaos_transition (job_id, from_state, to_state) VALUES (NEW.{jid}, NULL, NEW.{js}); END""",
            f"""CREATE TRIGGER IF NOT EXISTS chaos_job_state AFTER UPDATE OF {js} ON {jt}
        WHEN OLD.{js} IS NOT NEW.{js} BEGIN
        INSERT INTO chaos_transition (job_id, from_state, to_state) VALUES (NEW.{jid}, OLD.{js}, NEW.{js}); END""",
            f"""CREATE TRIGGER IF NOT EXISTS chaos_job_delete AFTER DELETE ON {jt} BEGIN
        INSERT INTO chaos_transition (job_id, from_state, to_state) VALUES (OLD.{jid}, OLD.{js}, NULL); END""",
        ]
        if m is not None:
            mt, mj, ms = _ident(m.name), _ident(m.job_id), _ident(m.step)
            out += [
                f"""CREATE TRIGGER IF NOT EXISTS chaos_memo_update AFTER UPDATE ON {mt} BEGIN
        INSERT INTO chaos_memo_change (job_id, step, what) VALUES (OLD.{mj}, OLD.{ms}, 'updated'); END""",
                f"""CREATE TRIGGER IF NOT EXISTS chaos_memo_delete AFTER DELETE ON {mt} BEGIN
        INSERT INTO chaos_memo_change (job_id, step, what) VALUES (OLD.{mj}, OLD.{ms}, 'deleted'); END""",
            ]
        if not attribute_writers:
            return out
        out.append("CREATE TABLE IF NOT EXISTS chaos_write (seq INTEGER PRIMARY KEY, job_id TEXT, kind TEXT, writer TEXT, detail TEXT)")
        # A claim is recorded before the state change of the same UPDATE (a claim that moves the
        # job to its next working state in one statement): fenced-writes reads the writes in order,
        # and the new owner's state change read before its claim would be a write after the old
        # owner's. SQLite orders two triggers on one row as it likes, so the claim's trigger also
        # records the statement's state change, and the state's trigger leaves such an UPDATE to it.
        # Each condition is true or false, never NULL: the state's trigger negates it.
        if j.token is not None:  # a claim hands out a larger token (or the first one, where a job starts without)
            tok = _ident(j.token)
            watched, claimed, holder = tok, f"NEW.{tok} IS NOT NULL AND (OLD.{tok} IS NULL OR NEW.{tok} > OLD.{tok})", f"NEW.{tok}"
        else:  # no token: a claim is the lease passing to a new owner
            own = _ident(j.lease_owner)
            watched, claimed, holder = own, f"NEW.{own} IS NOT NULL AND NEW.{own} IS NOT OLD.{own}", f"NEW.{own}"
        state_write = (f"INSERT INTO chaos_write (job_id, kind, writer, detail) "
                       f"SELECT NEW.{jid}, 'state', chaos_writer(), OLD.{js} || ' -> ' || NEW.{js} WHERE OLD.{js} IS NOT NEW.{js}")
        out.append(f"""CREATE TRIGGER IF NOT EXISTS chaos_w_claim AFTER UPDATE OF {watched} ON {jt}
        WHEN {claimed} BEGIN
        INSERT INTO chaos_write (job_id, kind, writer, detail) VALUES (NEW.{jid}, 'claim', chaos_writer(), {holder});
        {state_write}; END""")
        out.append(f"""CREATE TRIGGER IF NOT EXISTS chaos_w_state AFTER UPDATE OF {js} ON {jt}
        WHEN OLD.{js} IS NOT NEW.{js} AND NOT ({claimed}) BEGIN
        INSERT INTO chaos_write (job_id, kind, writer, detail) VALUES (NEW.{jid}, 'state', chaos_writer(), OLD.{js} || ' -> ' || NEW.{js}); END""")
        if m is not None:
            out.append(f"""CREATE TRIGGER IF NOT EXISTS chaos_w_memo AFTER INSERT ON {_ident(m.name)} BEGIN
        INSERT INTO chaos_write (job_id, kind, writer, detail) VALUES (NEW.{_ident(m.job_id)}, 'memo', chaos_writer(), NEW.{_ident(m.step)}); END""")
        if o is not None:
            out.append(f"""CREATE TRIGGER IF NOT EXISTS chaos_w_outbox AFTER INSERT ON {_ident(o.name)} BEGIN
        INSERT INTO chaos_write (job_id, kind, writer, detail) VALUES (NEW.{_ident(o.job_id)}, 'outbox', chaos_writer(), NEW.{_ident(o.kind)}); END""")
        return out

    def install(self, conn: sqlite3.Connection, *, attribute_writers: bool = False) -> None:
        for statement in self.audit_sql(attribute_writers=attribute_writers):
            conn.execute(statement)
        conn.commit()

    def snapshot(self, conn: sqlite3.Connection) -> Snapshot:
        """Everything the invariants read, in one read transaction on ``conn`` (the harness's own)."""
        j, m, o = self.job, self.memo, self.outbox
        conn.execute("BEGIN")
        try:
            snap = Snapshot()
            tables = f"{_ident(j.name)} j"
            payload = f"j.{_ident(j.payload)}"
            if j.payload_table is not None:
                tables += f" LEFT JOIN {_ident(j.payload_table)} p ON p.{_ident(j.payload_job_id)} = j.{_ident(j.id)}"
                payload = f"p.{_ident(j.payload)}"
            rest = (j.lease_owner, j.lease_until, j.next_run_at, j.last_error, j.result, j.token)
            columns = ", ".join([f"j.{_ident(j.id)}", f"j.{_ident(j.state)}", payload, *("NULL" if c is None else f"j.{_ident(c)}" for c in rest)])
            for r in conn.execute(f"SELECT {columns} FROM {tables}"):
                snap.jobs[r[0]] = JobView(*r[1:])
            snap.transitions = [tuple(r) for r in conn.execute("SELECT job_id, from_state, to_state FROM chaos_transition ORDER BY seq")]  # type: ignore[misc]
            if m is not None:
                cost = _cost_column(conn, m)
                rows = conn.execute(f"SELECT {_ident(m.job_id)}, {_ident(m.step)}, {_ident(m.output)}, {_col(cost)} FROM {_ident(m.name)}").fetchall()
                snap.memos = {(r[0], r[1]): r[2] for r in rows}
                if cost is not None:
                    snap.memo_costs = {(r[0], r[1]): r[3] for r in rows}
            snap.memo_changes = [tuple(r) for r in conn.execute("SELECT job_id, step, what FROM chaos_memo_change ORDER BY seq")]  # type: ignore[misc]
            if o is not None:
                columns = ", ".join(_col(c) for c in (o.id, o.job_id, o.kind, o.sent_at, o.next_attempt_at, o.key))
                snap.outbox = [OutboxView(*r) for r in conn.execute(f"SELECT {columns} FROM {_ident(o.name)} ORDER BY {_ident(o.id)}")]
            snap.damaged = dict(conn.execute(SELECT_DAMAGED))  # type: ignore[arg-type]
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'chaos_write'").fetchone():
                snap.writes = [tuple(r) for r in conn.execute("SELECT job_id, kind, writer, detail FROM chaos_write ORDER BY seq")]  # type: ignore[misc]
            return snap
        finally:
            conn.execute("COMMIT")

    def probe(self, db_path: str) -> "SqlProbe":
        return SqlProbe(self, db_path)

    def damageable(self) -> frozenset[str]:
        """What the damage faults may overwrite (:meth:`overwrite`): the job's payload and state,
        and a memo row where there is a memo table; every one a column the engine reads."""
        return frozenset({"payload", "state", *(["memo"] if self.memo is not None else [])})

    def tables(self) -> list[str]:
        """The engine's tables the schema names, jobs first."""
        return [self.job.name, *([self.job.payload_table] if self.job.payload_table else []),
                *(t.name for t in (self.memo, self.outbox) if t is not None)]

    def overwrite(self, conn: Any, job_id: str, what: str, value: str, *, step: str | None = None, unaudited: bool = False) -> str | None:
        """Overwrite one stored value with ``value``, as a damaged disk or a bad migration would,
        and return what was there (None: no such row, nothing written).

        ``what`` is ``"payload"`` or ``"state"`` (the job's row) or ``"memo"`` (the output of the
        memo row of ``step``). ``conn`` runs statements with ``?`` placeholders: the host's damage
        faults pass a connection of the harness's own, whose writes the audit names a person's.
        ``unaudited`` drops the audit's record of a memo's or a state's overwrite (a family's setup
        damages it as its premise: the change is not the engine's); a state is noted as damaged
        instead (:attr:`chaos.adapter.Snapshot.damaged`).
        """
        j, m = self.job, self.memo
        if what == "payload" and j.payload_table is not None:
            table, column, where, params = j.payload_table, j.payload, [j.payload_job_id], (job_id,)
        elif what in ("payload", "state"):
            table, column, where, params = j.name, getattr(j, what), [j.id], (job_id,)
        elif what == "memo" and m is not None and step is not None:
            table, column, where, params = m.name, m.output, [m.job_id, m.step], (job_id, step)
        else:
            raise ValueError(f"cannot overwrite {what!r} (step {step!r}): name 'payload', 'state', or 'memo' with a step of a schema with a memo table")
        condition = " AND ".join(f"{_ident(c)} = ?" for c in where)
        row = conn.execute(f"SELECT {_ident(column)} FROM {_ident(table)} WHERE {condition}", params).fetchone()
        if row is None:
            return None
        conn.execute(f"UPDATE {_ident(table)} SET {_ident(column)} = ? WHERE {condition}", (value, *params))
        if unaudited and what == "memo":
            conn.execute("DELETE FROM chaos_memo_change WHERE job_id = ? AND step = ?", params)
        if unaudited and what == "state" and row[0] != value:
            # The audit forgets the overwrite and notes the state as the harness's own damage
            # (Snapshot.damaged): the engine's quarantine out of it is checked as what it is.
            conn.execute("DELETE FROM chaos_transition WHERE seq = (SELECT max(seq) FROM chaos_transition WHERE job_id = ?)", params)
            conn.execute("INSERT INTO chaos_damaged_state (job_id, state) VALUES (?, ?)", (job_id, value))
        return row[0]

    def consistency_sql(self) -> list[tuple[str, str]]:
        """(what, a query counting it) for each kind of row the engine could only leave behind by
        a write applied in part: memo or outbox rows without their job, a lease half-written."""
        j, m, o = self.job, self.memo, self.outbox
        jt, jid = _ident(j.name), _ident(j.id)
        out = []
        owned = [(t.name, t.job_id, what) for t, what in ((m, "memo rows"), (o, "outbox rows")) if t is not None]
        if j.payload_table is not None:
            owned.append((j.payload_table, j.payload_job_id, "payload rows"))
        for table, job_id, what in owned:
            out.append((f"{what} without their job", f"SELECT count(*) FROM {_ident(table)} t "
                        f"WHERE NOT EXISTS (SELECT 1 FROM {jt} j WHERE j.{jid} = t.{_ident(job_id)})"))
        if j.payload_table is not None:
            out.append(("jobs without their payload row", f"SELECT count(*) FROM {jt} j WHERE NOT EXISTS (SELECT 1 FROM "
                        f"{_ident(j.payload_table)} p WHERE p.{_ident(j.payload_job_id)} = j.{jid})"))
        if j.lease_until is not None:
            own, until = _ident(j.lease_owner), _ident(j.lease_until)
            out.append(("jobs with a lease owner and no expiry, or the reverse",
                        f"SELECT count(*) FROM {jt} WHERE ({own} IS NULL) <> ({until} IS NULL)"))
        return out


class SqlProbe:
    """At the moment of a paid call, on a connection of its own (one per process): is that step's
    memo committed; does the caller hold the lease (owner, unexpired, and its token if any)?"""

    def __init__(self, schema: SqlSchema, db_path: str) -> None:
        self.db_path = db_path
        j, m = schema.job, schema.memo
        self._memo = None if m is None else (
            f"SELECT 1 FROM {_ident(m.name)} WHERE {_ident(m.job_id)} = ? AND {_ident(m.step)} = ?")
        self._lease = f"SELECT {_col(j.lease_owner)}, {_col(j.lease_until)}, {_col(j.token)} FROM {_ident(j.name)} WHERE {_ident(j.id)} = ?"
        self._has_token = j.token is not None
        self._conns = ThreadConnections(harness_connect, db_path, timeout=30, check_same_thread=False)  # steps may run in threads

    def __call__(self, job_id: str, step: str, worker_id: str, token: Any, now: float) -> tuple[bool, bool]:
        conn = self._conns.get()
        memo = self._memo is not None and conn.execute(self._memo, (job_id, step)).fetchone() is not None
        lease = conn.execute(self._lease, (job_id,)).fetchone()
        valid = (lease is not None and lease[0] == worker_id and (lease[1] is None or lease[1] > now)
                 and (not self._has_token or lease[2] == token))
        return memo, bool(valid)

    def close(self) -> None:
        self._conns.close()


class SqliteAdapter:
    """A base for an engine on SQLite: declare the schema and the states, write ``create_schema``
    and ``open``; creating, inspecting and probing come from the declaration.

    States: ``table`` (state -> the states it may move to), ``steps`` ((step, working, done) per
    step, in order), ``final`` (final state -> the effect kinds a job there has delivered),
    ``parked`` (settled states that are not final: failed, cancelled, waiting for a person),
    ``initial`` (the states a job is created in).
    """

    name = "sqlite-engine"
    lease_s = 30.0
    schema: SqlSchema = SqlSchema()
    table: Mapping[str, Sequence[str]] = {}
    steps: Sequence[tuple[str, str, str]] = ()
    final: Mapping[str, Sequence[str]] = {}
    parked: Sequence[str] = ()
    initial: Sequence[str] = ()
    conflict_errors: tuple[type[BaseException], ...] = ()

    # -- what the subclass writes ------------------------------------------------------------------
    def create_schema(self, conn: sqlite3.Connection) -> None:
        """Create the engine's own tables on ``conn`` (often: open the engine once and close it).
        Where the engine opens its database itself from a path or a URL (DBOS Transact, anything on
        SQLAlchemy), declare ``create_with = "path"``: it is then given the database file's path,
        and runs in a child process of its own, never the harness's (see :func:`make_tables`)."""
        raise NotImplementedError("create the engine's tables here")

    def open(self, db_path: str, world: Any, *, worker_id: str, clock: Any, rng: Any) -> Any:
        raise NotImplementedError("return a session: submit, run_once, send_outbox, close (see chaos.adapter.Session)")

    def targets(self) -> dict[str, Callable[..., Any]]:
        raise NotImplementedError("name the functions an iteration enters: {'worker': ..., 'sender': ...}")

    # -- from the declaration ------------------------------------------------------------------------
    def states(self) -> Mapping[str, Sequence[str]]:
        return self.table

    def step_states(self) -> Mapping[str, tuple[str, str]]:
        return {step: (working, done) for step, working, done in self.steps}

    def settled_states(self) -> frozenset[str]:
        return frozenset(self.final) | frozenset(self.parked)

    def final_effects(self) -> Mapping[str, Sequence[str]]:
        return self.final

    def initial_states(self) -> frozenset[str]:
        return frozenset(self.initial) if self.initial else frozenset(list(self.table)[:1])

    def trace_paths(self) -> list[str]:
        """The files of the functions :meth:`targets` names."""
        return sorted({os.path.abspath(inspect.getfile(fn)) for fn in self.targets().values()})

    def create(self, db_path: str, *, attribute_writers: bool = False) -> None:
        if creates_from_path(self):
            make_tables(self, db_path)
        conn = sqlite3.connect(db_path)
        try:
            if not creates_from_path(self):
                self.create_schema(conn)
                conn.commit()
            self.schema.check(conn)
            self.schema.install(conn, attribute_writers=attribute_writers)
        finally:
            conn.close()

    def check_declaration(self) -> None:
        """Check what the adapter declares, before any scenario runs (a mismatch is the adapter's,
        and read as the engine's it gave findings that were not): its states (every step's, final,
        parked and initial state is in ``table``, and some state is final), then its schema against
        the tables ``create_schema`` makes in a scratch database (:meth:`SqlSchema.check`)."""
        problems = []
        if not self.final:
            problems.append("final is empty: declare the state(s) a finished job ends in, e.g. final = {'done': ('email',)}")
        for step, working, done in self.steps:
            problems += [f"step {step!r}'s {what} state {state!r} is not in table" for what, state in (("working", working), ("done", done))
                         if state not in self.table]
        for what, states in (("final", self.final), ("parked", self.parked), ("initial", self.initial)):
            problems += [f"{what} state {state!r} is not in table" for state in states if state not in self.table]
        if problems:
            raise ValueError(f"the adapter's states do not match its table ({', '.join(map(repr, self.table)) or 'empty'}): "
                             + "; ".join(problems))
        with tempfile.TemporaryDirectory(prefix="crashgate-schema-") as directory:
            conn = sqlite3.connect(os.path.join(directory, "schema.db"))
            try:
                try:
                    if creates_from_path(self):
                        make_tables(self, os.path.join(directory, "schema.db"))
                    else:
                        self.create_schema(conn)
                except (sqlite3.Error, ChildFailed) as exc:
                    raise ValueError(f"the adapter's create_schema failed: {type(exc).__name__}: {exc}") from None
                self.schema.check(conn)
            finally:
                conn.close()

    def inspect(self, db_path: str) -> Snapshot:
        """Read on a connection of the harness's own, kept per process and file until :meth:`release`."""
        readers = self.__dict__.setdefault("_readers", {})
        key = (os.getpid(), db_path)
        conn = readers.get(key)
        if conn is None:
            conn = readers[key] = sqlite3.connect(db_path, timeout=30, check_same_thread=False, isolation_level=None)
        return self.schema.snapshot(conn)

    def release(self, db_path: str) -> None:
        conn = self.__dict__.get("_readers", {}).pop((os.getpid(), db_path), None)
        if conn is not None:
            conn.close()

    def probe(self, db_path: str) -> SqlProbe:
        return self.schema.probe(db_path)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_readers", None)  # connections stay in the process that opened them
        return state
