"""Engines without a job table: read each job from the library's own rows.

A queue library (litequeue, persist-queue, ...) keeps no row per job with a state and an owner:
it keeps one row per message, with an integer status, and the job's id inside the message (JSON
or a pickle). Its adapter declares how a job is read from those rows, as SQL expressions over the
library's table (:class:`JobRows`, with :class:`MemoRows` and :class:`OutboxRows` for where a
step's output and the effects waiting to be sent are read; together a :class:`RowSchema`), and
keeps no table of its own. The decoders ``crashgate_json(text, '$.path')`` and
``crashgate_unpickle(blob, 'key')`` are registered on the harness's own connections (never on the
library's), so an expression may read inside a message.

A job is its **current row**: of the rows whose job id expression gives that id, the one with the
greatest ``order``. Its state is the status's name (``statuses`` maps the library's integers),
prefixed with the row's step where the declaration has a ``step`` expression (``fetch:working``).
The audit is three triggers on the library's table that copy each inserted, updated or deleted
row into the harness's table ``chaos_rows`` (no decoding, no function call on the library's
connection except ``chaos_writer()`` where writers are attributed); the snapshot replays those
copies through the same expressions, on the harness's connection, to get every change of a job's
derived state, and records a move into the ``working`` status as a claim.

>>> jobs = JobRows(table="Queue", job_id="crashgate_json(data, '$.job_id')", status="status",
...                statuses={0: "ready", 1: "working", 2: "done", 3: "failed"}, step="crashgate_json(data, '$.step')")
>>> schema = RowSchema(jobs)
>>> [s.split()[5] for s in schema.audit_sql() if s.startswith("CREATE TRIGGER")]
['chaos_rows_insert', 'chaos_rows_update', 'chaos_rows_delete']
>>> schema.damageable()  # the library reads no damaged row the harness could make: nothing to damage
frozenset()
"""

from __future__ import annotations

import base64
import json
import pickle
import sqlite3
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from chaos.adapter import JobView, OutboxView, Snapshot
from chaos.adapters.sql import DAMAGED_SQL, SELECT_DAMAGED, SqliteAdapter
from chaos.core.pool import harness_connect
from chaos.core.thread_connections import ThreadConnections

__all__ = ["JobRows", "MemoRows", "OutboxRows", "RowSchema", "RowProbe", "RowsAdapter", "AT_OPEN", "register_decoders",
           "crashgate_json", "crashgate_unpickle"]

# A writer named "<worker>@open" is that worker opening the engine (its session's constructor):
# where the declaration says the library takes over unfinished work at open, such a move out of a
# working state is recorded as the worker's claim, not as a write without one.
AT_OPEN = "@open"
AUDIT_TABLE = "chaos_rows"
SELECT_COLUMNS = "SELECT name FROM pragma_table_info(?)"


def _ident(name: str) -> str:
    """``name`` quoted as an SQL identifier; a table or column name with a quote in it is refused."""
    if '"' in name or not name:
        raise ValueError(f"table or column name {name!r} must be non-empty and have no double quote")
    return f'"{name}"'


def _literal(text: str) -> str:
    """``text`` as an SQL string literal (a table's name, written into a trigger or a query)."""
    return "'" + text.replace("'", "''") + "'"


def crashgate_json(text: Any, path: str) -> Any:
    """The value at ``path`` (``$.a.b``) in the JSON ``text``, as SQLite's ``json_extract`` gives it
    (an object or a list as JSON text); None where the text is not JSON or the path is absent."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    for key in path.removeprefix("$").split(".")[1:] if path != "$" else ():
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value


def crashgate_unpickle(blob: Any, key: str) -> Any:
    """The item ``key`` of the dict pickled in ``blob`` (JSON text where it is a dict or a list);
    ``key`` '' gives the whole value. ``blob`` may be the pickle's bytes or its base64 text (DBOS
    stores a step's output so). None where the blob is no pickle or the key is absent.
    Registered on the harness's connections only: the rows it reads are those the workflow under
    test wrote into its own scenario database.

    >>> crashgate_unpickle(base64.b64encode(pickle.dumps({"i": 2})).decode(), "i")
    2
    """
    try:
        value = pickle.loads(base64.b64decode(blob, validate=True) if isinstance(blob, str) else blob)
    except Exception:  # a damaged or foreign blob reads as no value, as a path that is absent does
        return None
    if hasattr(value, "_asdict"):  # a named tuple (huey's Message) reads as the dict of its fields
        value = value._asdict()
    if key:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    # A tuple (a task's arguments) is JSON's list; a value JSON has no type for reads as its text.
    return json.dumps(value, sort_keys=True, default=str) if isinstance(value, (dict, list, tuple)) else value


def register_decoders(conn: sqlite3.Connection) -> sqlite3.Connection:
    """Register ``crashgate_json`` and ``crashgate_unpickle`` on ``conn`` (deterministic: usable in
    an index or a view) and return it."""
    conn.create_function("crashgate_json", 2, crashgate_json, deterministic=True)
    conn.create_function("crashgate_unpickle", 2, crashgate_unpickle, deterministic=True)
    return conn


@dataclass(frozen=True)
class JobRows:
    """How a job is read from the library's rows: each field an SQL expression over ``table``.

    ``status``: the row's status (``statuses`` names its values; a value it does not name reads as
    its text). ``step``: the step the row is for, where the library's rows are one message per step
    (None: the state is the status's name alone). ``order``: which of a job's rows is its current
    one (the greatest). ``working``: the status name of a claimed row (a move into it is a claim).
    ``damage``: what the harness may damage, as {"payload" | "state": the column of ``table`` the
    library itself reads}; empty where the library reads nothing the harness could damage (the
    damage families are then not applicable). ``takeover_at_open``: the library takes unfinished
    work back when a process opens it (persist-queue's resume of unacknowledged items).
    ``deleted``: for a library that deletes a message as it hands it out (huey), what a deleted
    row means: it is not gone but taken (a move into ``working``, the taker's claim), and while it
    is its job's current row its status is this expression, over the audit's copy of the row, read
    when the snapshot is taken (it may read the library's other tables: whether a result was
    stored for the message). None: a deleted row is gone.
    """

    table: str
    job_id: str
    status: str
    statuses: Mapping[int, str] = field(default_factory=dict)
    step: str | None = None
    order: str = "rowid"
    payload: str = "NULL"
    owner: str = "NULL"
    lease_until: str = "NULL"
    result: str = "NULL"
    next_run_at: str = "NULL"
    working: str = "working"
    damage: Mapping[str, str] = field(default_factory=dict)
    takeover_at_open: bool = False
    deleted: str | None = None

    def state_of(self, status: Any, step: Any) -> str | None:
        if status is None:
            return None
        name = self.statuses.get(status, str(status)) if isinstance(status, int) else str(status)
        return name if self.step is None or step is None else f"{step}:{name}"


@dataclass(frozen=True)
class MemoRows:
    """Where a finished step's output is read: rows of ``table`` for which ``where`` holds give the
    output of (``job_id``, ``step``). Expressions, as in :class:`JobRows`."""

    table: str
    job_id: str
    step: str
    output: str
    where: str = "1"


@dataclass(frozen=True)
class OutboxRows:
    """Where effects wait to be sent, one row each: ``sent_at`` is NULL until the effect was sent;
    ``key`` its idempotency key where not ``<job_id>:<kind>``. Expressions, as in :class:`JobRows`."""

    table: str
    id: str
    job_id: str
    kind: str
    sent_at: str
    key: str = "NULL"
    where: str = "1"


@dataclass(frozen=True)
class RowSchema:
    """A library's rows as the harness reads them: jobs, and where memos and the outbox are (none:
    give an empty tuple or None), with the methods the harness calls on a ``chaos.adapters.sql.SqlSchema``.

    ``also``: more tables whose rows are rows of a job, where the library keeps a job in several
    (DBOS Transact: its workflow's status row, and a row per finished step). Each is a
    :class:`JobRows` of its own; a job's current row is then the one with the greatest ``order``
    among all its rows, in any of the tables, so the orders must be comparable across them. Only
    ``jobs`` says what a claim is, what is damaged and who owns a job.
    """

    jobs: JobRows
    memos: Sequence[MemoRows] = ()
    outbox: OutboxRows | None = None
    also: Sequence[JobRows] = ()

    def job_tables(self) -> tuple[JobRows, ...]:
        """Every declaration of a job's rows: ``jobs``, then ``also``."""
        return (self.jobs, *self.also)

    def damageable(self) -> frozenset[str]:
        """What the damage faults may overwrite here ('payload', 'state'): only what the library reads."""
        return frozenset(self.jobs.damage)

    def tables(self) -> list[str]:
        names = [*(j.table for j in self.job_tables()), *(m.table for m in self.memos), *([self.outbox.table] if self.outbox else [])]
        return list(dict.fromkeys(names))

    def _expressions(self) -> list[tuple[str, str, str]]:
        out: list[tuple[str, str, str]] = []
        for j in self.job_tables():
            out += [(j.table, f"JobRows({name}=...)", getattr(j, name)) for name in
                    ("job_id", "status", "order", "payload", "owner", "lease_until", "result", "next_run_at")]
            out += [(j.table, f"JobRows({name}=...)", getattr(j, name)) for name in ("step", "deleted") if getattr(j, name) is not None]
        for m in self.memos:
            out += [(m.table, f"MemoRows({name}=...)", getattr(m, name)) for name in ("job_id", "step", "output", "where")]
        if self.outbox is not None:
            o = self.outbox
            out += [(o.table, f"OutboxRows({name}=...)", getattr(o, name)) for name in ("id", "job_id", "kind", "sent_at", "key", "where")]
        return out

    def check(self, conn: sqlite3.Connection) -> None:
        """Raise :class:`ValueError` naming each table that does not exist and each expression that
        does not compile against its table (with the decoders registered), and the fix."""
        register_decoders(conn)
        have = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        problems = [f"table {t!r} does not exist (the tables: {', '.join(have) or 'none'})" for t in self.tables() if t not in have]
        for table, declared, expression in self._expressions():
            if table in have:
                try:
                    conn.execute(f"SELECT {expression} FROM {_ident(table)} LIMIT 0")
                except sqlite3.Error as exc:
                    problems.append(f"{declared} {expression!r} does not read table {table!r}: {exc}")
        problems += [f"JobRows(damage=...) names {what!r}: only 'payload' and 'state' can be damaged"
                     for what in self.jobs.damage if what not in ("payload", "state")]
        if problems:
            raise ValueError("the adapter's rows do not match the library's tables: " + "; ".join(problems)
                             + ": name the library's own table and SQL expressions over its columns in RowSchema(JobRows(...))")

    def audit_sql(self, *, attribute_writers: bool = False, columns: Sequence[str] | Mapping[str, Sequence[str]] = ()) -> list[str]:
        """The audit: a copy of every inserted, updated or deleted row of each table of the jobs
        (its ``columns``, as :meth:`install` reads them: a sequence for the one table of ``jobs``,
        or a mapping of each table to its columns), with the table's name and, where writers are
        attributed, the writer. One audit table holds the copies of every table, in the order
        they were written; a column two tables share holds either's value, read through that
        table's own declaration only."""
        per_table = dict(columns) if isinstance(columns, Mapping) else {self.jobs.table: list(columns)}
        union = list(dict.fromkeys(c for cs in per_table.values() for c in cs if c.lower() != "rowid"))
        writer = "chaos_writer()" if attribute_writers else "NULL"
        out = [f"CREATE TABLE IF NOT EXISTS {AUDIT_TABLE} (chaos_seq INTEGER PRIMARY KEY, chaos_op TEXT, chaos_writer TEXT, "
               f"chaos_table TEXT, rowid INTEGER{''.join(f', {_ident(c)}' for c in union)})", DAMAGED_SQL]
        for i, declared in enumerate(self.job_tables()):
            t = _ident(declared.table)
            cols = [_ident(c) for c in per_table.get(declared.table, ()) if c.lower() != "rowid"]
            names = ", ".join(["chaos_op", "chaos_writer", "chaos_table", "rowid", *cols])
            prefix = "chaos_rows" if i == 0 else f"chaos_rows_{i}"
            for op, row in (("insert", "NEW"), ("update", "NEW"), ("delete", "OLD")):
                values = ", ".join([f"'{op}'", writer, _literal(declared.table), f"{row}.rowid", *(f"{row}.{c}" for c in cols)])
                out.append(f"""CREATE TRIGGER IF NOT EXISTS {prefix}_{op} AFTER {op.upper()} ON {t} BEGIN
        INSERT INTO {AUDIT_TABLE} ({names}) VALUES ({values}); END""")
        return out

    def install(self, conn: sqlite3.Connection, *, attribute_writers: bool = False) -> None:
        columns = {j.table: [r[0] for r in conn.execute(SELECT_COLUMNS, (j.table,))] for j in self.job_tables()}
        for statement in self.audit_sql(attribute_writers=attribute_writers, columns=columns):
            conn.execute(statement)
        conn.commit()

    def _job_rows(self, conn: sqlite3.Connection, j: JobRows, source: str, extra: str = "", where: str = "",
                  params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        exprs = [j.job_id, j.status, j.step or "NULL", j.order, *([extra] if extra else [])]
        return conn.execute(f"SELECT {', '.join(exprs)} FROM {source}{where}", params).fetchall()

    def snapshot(self, conn: sqlite3.Connection) -> Snapshot:
        """Everything the invariants read, in one read transaction on ``conn`` (the harness's own)."""
        register_decoders(conn)
        conn.execute("BEGIN")
        try:
            snap = Snapshot()
            current: dict[Any, tuple[Any, ...]] = {}
            # The decoded fields of each job's current row only: a job has a row per message it ever had.
            for j in self.job_tables():
                for job, status, step, order, rowid in self._job_rows(conn, j, _ident(j.table), "rowid"):
                    if job is not None and (job not in current or order > current[job][3]):
                        current[job] = (job, j.state_of(status, step), step, order, rowid, j)
            snap.transitions, snap.writes, taken = self._replay(conn)
            for job, state, step, _, rowid, j in current.values():
                rest = f"json_array({j.payload}, {j.owner}, {j.lease_until}, {j.result}, {j.next_run_at})"
                more = conn.execute(f"SELECT {rest} FROM {_ident(j.table)} WHERE rowid = ?", (rowid,)).fetchone()[0]
                payload, owner, until, result, due = json.loads(more)
                snap.jobs[str(job)] = JobView(state or "", _text(payload), owner, until, due, result=_text(result))
            for job, (state, seq, j) in taken.items():  # a job whose current row was deleted: read from its copy
                rest = f"json_array({j.payload}, {j.owner}, {j.lease_until}, {j.result}, {j.next_run_at})"
                payload, owner, until, result, due = json.loads(conn.execute(f"SELECT {rest} FROM {AUDIT_TABLE} WHERE chaos_seq = ?", (seq,)).fetchone()[0])
                snap.jobs[job] = JobView(state, _text(payload), owner, until, due, result=_text(result))
            for m in self.memos:  # a step's first memo row, its output decoded once
                first: dict[tuple[str, str], Any] = {}
                for job, step, rowid in conn.execute(f"SELECT {m.job_id}, {m.step}, rowid FROM {_ident(m.table)} WHERE {m.where}"):
                    if job is not None and step is not None:
                        first.setdefault((str(job), str(step)), rowid)
                for key, rowid in first.items():
                    if key not in snap.memos:
                        output = conn.execute(f"SELECT {m.output} FROM {_ident(m.table)} WHERE rowid = ?", (rowid,)).fetchone()[0]
                        snap.memos[key] = _text(output)
            if self.outbox is not None:
                o = self.outbox
                rows = conn.execute(f"SELECT {o.id}, {o.job_id}, {o.kind}, {o.sent_at}, NULL, {o.key} FROM {_ident(o.table)} "
                                    f"WHERE {o.where} ORDER BY {o.id}")
                snap.outbox = [OutboxView(*r) for r in rows]
            snap.damaged = dict(conn.execute(SELECT_DAMAGED))  # type: ignore[arg-type]
            return snap
        finally:
            conn.execute("COMMIT")

    def _replay(self, conn: sqlite3.Connection) -> tuple[list[Any], list[Any], dict[str, tuple[str, int, JobRows]]]:
        """Replay the audit's copies of the rows, in order, into each change of a job's derived
        state (the transitions) and who made them (the writes). A row moving into ``working`` is a
        claim, whether or not it is the job's current row (a consumer takes a message the job has
        moved on from, resumed at open); any other write counts where it moves the job's state: a
        consumer marking done the message whose next one another consumer has taken writes to a
        message, not to the job. The rows of every table of the jobs replay in the one order they
        were written. Where a declaration says what a deleted row means, also the jobs whose
        current row was deleted: their state, the audit's copy of that row and its declaration.

        The copies already replayed on ``conn`` are not replayed again (:class:`_Replay`): a drain
        that inspects the store after each of its rounds reads only what the round wrote."""
        replay = _Replay.on(conn, self)
        copies: list[tuple[Any, ...]] = []  # (declaration, job, status, step, order, seq, op, writer, rowid)
        tables = self.job_tables()
        for j in tables:  # with one table, every copy is its own
            where, params = (" WHERE chaos_seq > ? ORDER BY chaos_seq", (replay.seq,)) if len(tables) == 1 else \
                (" WHERE chaos_table = ? AND chaos_seq > ? ORDER BY chaos_seq", (j.table, replay.seq))
            copies += [(j, *r) for r in self._job_rows(conn, j, AUDIT_TABLE, "chaos_seq, chaos_op, chaos_writer, rowid", where, params)]
        for j, job, status, step, order, seq, op, writer, rowid in sorted(copies, key=lambda c: c[5]):
            self._replay_one(replay, j, op, writer, rowid, job, status, step, order, seq)
            replay.seq, replay.count, replay.mark = seq, replay.count + 1, json.dumps([op, writer, rowid], separators=(",", ":"), ensure_ascii=False)
        transitions, last = list(replay.transitions), replay.last
        taken: dict[str, tuple[str, int, JobRows]] = {}
        for key in list(last) if any(j.deleted is not None for j in self.job_tables()) else ():
            current = _current(replay.of_job.get(key, {}), key)
            if current is None or not current[4]:
                continue
            j = current[5]
            status, step = conn.execute(f"SELECT {j.deleted}, {j.step or 'NULL'} FROM {AUDIT_TABLE} WHERE chaos_seq = ?",
                                        (current[3],)).fetchone()
            state = j.state_of(status, step) or ""
            if state != last[key]:
                transitions.append((str(key), last[key], state))
            taken[str(key)] = (state, current[3], j)
        return transitions, list(replay.writes), taken

    def _replay_one(self, replay: "_Replay", j: JobRows, op: str, writer: Any, rowid: Any, job: Any, status: Any, step: Any,
                    order: Any, seq: int) -> None:
        """Replay one copy of a row of ``j``'s table (see :meth:`_replay`) into ``replay``."""
        rows, of_job, last = replay.rows, replay.of_job, replay.last
        row_key: tuple[Any, ...] = (j.table, rowid)
        before = rows.pop(row_key, None) if op == "delete" else rows.get(row_key)
        if before is not None:
            of_job[before[0]].pop(row_key, None)
        if op == "delete" and j.deleted is not None and before is not None:
            row_key = (j.table, "deleted", seq)  # the row lives on, taken (JobRows.deleted)
            rows[row_key] = (before[0], j.state_of(j.working, step), before[2], seq, True, j)
        elif op != "delete":
            rows[row_key] = (job, j.state_of(status, step), order, seq, False, j)
        after = rows.get(row_key)
        if after is not None:
            of_job.setdefault(after[0], {})[row_key] = after
        moved = False
        for key in sorted({r[0] for r in (before, after) if r is not None and r[0] is not None}):
            new = _current(of_job.get(key, {}), key)
            if (new and new[1]) != last.get(key):
                replay.transitions.append((str(key), last.get(key), new and new[1]))
                last[key], moved = new and new[1], True
        row_before, row_after = before and before[1], after and after[1]
        if writer is not None and row_before != row_after and (after or before)[0] is not None:
            write = self._write(str((after or before)[0]), writer, row_before, row_after)
            if write[1] == "claim" or moved:  # marking a row the job has moved on from is no write to the job
                replay.writes.append(write)

    def _write(self, job: str, writer: str, old: str | None, new: str | None) -> tuple[str, str, str, str]:
        at_open = writer.endswith(AT_OPEN)
        who = writer.removesuffix(AT_OPEN)
        claimed = new is not None and new.rsplit(":", 1)[-1] == self.jobs.working
        if claimed or (at_open and self.jobs.takeover_at_open):
            return (job, "claim", who, str(new))
        return (job, "state", who, f"{old} -> {new}")

    def probe(self, db_path: str) -> "RowProbe":
        return RowProbe(self, db_path)

    def overwrite(self, conn: Any, job_id: str, what: str, value: str, *, step: str | None = None, unaudited: bool = False) -> str | None:
        """Overwrite the column the declaration names for ``what`` in the job's current row (None:
        nothing to damage there, nothing written). A memo is never damaged here: it is read from
        rows the library owns, and a declaration names no memo column the library reads."""
        column = self.jobs.damage.get(what)
        raw = getattr(conn, "conn", conn)  # a ScenarioDb, or a connection
        if column is None or not isinstance(raw, sqlite3.Connection):
            return None
        register_decoders(raw)
        j, t = self.jobs, _ident(self.jobs.table)
        rows = [r for r in raw.execute(f"SELECT rowid, {j.order}, {_ident(column)} FROM {t} WHERE {j.job_id} = ?", (job_id,))]
        if not rows:
            return None
        rowid, _, original = max(rows, key=lambda r: r[1])
        raw.execute(f"UPDATE {t} SET {_ident(column)} = ? WHERE rowid = ?", (value, rowid))
        if unaudited and what == "state":
            raw.execute("INSERT INTO chaos_damaged_state (job_id, state) VALUES (?, ?)", (job_id, value))
        return original

    def consistency_sql(self) -> list[tuple[str, str]]:
        return []  # the library's rows hold each job whole: nothing of it can be left without the rest


def _current(rows: dict[Any, tuple[Any, ...]], job: Any) -> tuple[Any, ...] | None:
    """A job's current row: of its rows, the greatest order; of those, the one written last."""
    live = [r for r in rows.values() if r[0] == job]
    return max(live, key=lambda r: (r[2], r[3])) if live else None


# The audits replayed, kept per connection (the harness keeps one reader per process and file), the
# most recently used last: a few, since a process inspects one scenario's database at a time.
REPLAYS_KEPT_MAX = 8
# How many copies the audit holds up to a sequence number, and what the last of them is: where
# either differs from the replay's, the audit was rewritten under the connection.
SELECT_AUDIT_MARK = (f"SELECT count(*), (SELECT json_array(chaos_op, chaos_writer, rowid) FROM {AUDIT_TABLE} WHERE chaos_seq = :seq) "
                     f"FROM {AUDIT_TABLE} WHERE chaos_seq <= :seq")


@dataclass
class _Replay:
    """The audit of one database replayed up to its copy ``seq`` (``count`` copies): the rows as
    they then stood (``rows``, and by job ``of_job``), each job's last state, the transitions and
    the writes so far. A snapshot replays only the copies after ``seq``; one whose audit no longer
    starts with the copies replayed (the file rewritten under the connection) replays it all again."""

    # (table, rowid), or (table, "deleted", seq) for a deleted row that lives on -> (job, state, order, seq, deleted, declaration)
    rows: dict[Any, tuple[Any, ...]] = field(default_factory=dict)
    of_job: dict[Any, dict[Any, tuple[Any, ...]]] = field(default_factory=dict)  # the same rows by job: a change reads its job's
    last: dict[Any, str | None] = field(default_factory=dict)
    transitions: list[Any] = field(default_factory=list)
    writes: list[Any] = field(default_factory=list)
    seq: int = 0
    count: int = 0
    mark: str | None = None  # the last copy replayed: json_array(chaos_op, chaos_writer, rowid)

    @classmethod
    def on(cls, conn: sqlite3.Connection, schema: RowSchema) -> "_Replay":
        """The replay kept for ``conn`` and ``schema``, if the audit still starts with what it
        replayed; else a new one, kept in its place."""
        key = (id(conn), id(schema))
        kept = _REPLAYS.pop(key, None)
        replay = kept[2] if kept is not None and kept[0] is conn and kept[1] is schema else None
        if replay is not None and tuple(conn.execute(SELECT_AUDIT_MARK, {"seq": replay.seq}).fetchone()) != (replay.count, replay.mark):
            replay = None
        replay = replay or cls()
        _REPLAYS[key] = (conn, schema, replay)
        while len(_REPLAYS) > REPLAYS_KEPT_MAX:
            _REPLAYS.pop(next(iter(_REPLAYS)))
        return replay


_REPLAYS: dict[tuple[int, int], tuple[sqlite3.Connection, RowSchema, _Replay]] = {}


def _text(value: Any) -> str | None:
    return None if value is None else value if isinstance(value, str) else json.dumps(value, sort_keys=True)


class RowProbe:
    """At the moment of a paid call, on a connection of its own (one per process): is that step's
    memo committed; does the caller hold the job (its owner, where the library names one; a library
    without owners is taken to hand a claimed row to one consumer)?"""

    def __init__(self, schema: RowSchema, db_path: str) -> None:
        self.schema, self.db_path = schema, db_path
        self._conns = ThreadConnections(_probe_connection, db_path)  # a library may run its steps in threads

    def __call__(self, job_id: str, step: str, worker_id: str, token: Any, now: float) -> tuple[bool, bool]:
        conn = self._conns.get()
        memo = any(conn.execute(f"SELECT 1 FROM {_ident(m.table)} WHERE {m.where} AND {m.job_id} = ? AND {m.step} = ?",
                                (job_id, step)).fetchone() for m in self.schema.memos)
        j = self.schema.jobs
        owners = [r for r in conn.execute(f"SELECT {j.order}, {j.owner}, {j.lease_until} FROM {_ident(j.table)} WHERE {j.job_id} = ?",
                                          (job_id,))]
        if not owners:  # a message deleted as it was handed out (JobRows.deleted) is held by that one consumer
            return memo, j.deleted is not None
        _, owner, until = max(owners, key=lambda r: r[0])
        return memo, (j.owner == "NULL" or owner == worker_id) and (until is None or until > now)

    def close(self) -> None:
        self._conns.close()


def _probe_connection(db_path: str) -> sqlite3.Connection:
    return register_decoders(harness_connect(db_path, timeout=30, check_same_thread=False))


class RowsAdapter(SqliteAdapter):
    """A base for an engine without a job table (a queue library): declare ``schema`` as a
    :class:`RowSchema`, the states, ``create_schema`` and ``open``; creating (the audit on the
    library's own table), inspecting and probing come from the declaration, as on
    :class:`~chaos.adapters.sql.SqliteAdapter`, whose methods call the schema's."""

    schema: RowSchema  # type: ignore[assignment]
