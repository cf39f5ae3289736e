"""tinyflow: a durable-workflow engine in the minimal form, written without crashgate in mind.

Three tables with the storage minimum's columns: ``job``, ``step_result`` (the memo) and
``outbox``. A worker claims a due job by writing its name and an expiry into the row (a lease with
an owner and an expiry, no fencing token, no heartbeat), runs the job's steps in order, keeps each
step's output in the memo in the same transaction that moves the state (compare-and-swap on the
state only), and writes the last step's effects into the outbox in that transaction too. A sender
delivers the outbox. Retryable errors (``TimeoutError``, ``ConnectionError``) back off with full
jitter; anything else fails the job; a job claimed five times is given up.
"""

from __future__ import annotations

import json
import random
import sqlite3
from dataclasses import dataclass
from typing import Any, Callable

SCHEMA = """
CREATE TABLE IF NOT EXISTS job (id TEXT PRIMARY KEY, state TEXT NOT NULL, payload TEXT NOT NULL, result TEXT,
    attempts INTEGER NOT NULL DEFAULT 0, next_run_at REAL NOT NULL, lease_until REAL, lease_owner TEXT,
    last_error TEXT, created REAL NOT NULL, updated REAL NOT NULL);
CREATE INDEX IF NOT EXISTS job_due ON job (next_run_at) WHERE state NOT IN ('published', 'failed');
CREATE TABLE IF NOT EXISTS step_result (job_id TEXT NOT NULL, step TEXT NOT NULL, output TEXT NOT NULL,
    cost REAL NOT NULL, at REAL NOT NULL, PRIMARY KEY (job_id, step));
CREATE TABLE IF NOT EXISTS outbox (id INTEGER PRIMARY KEY, job_id TEXT NOT NULL, kind TEXT NOT NULL, payload TEXT NOT NULL,
    sent_at REAL, attempts INTEGER NOT NULL DEFAULT 0, UNIQUE (job_id, kind));
"""
FIRST, FINAL, FAILED = "queued", "published", "failed"
ATTEMPTS_MAX = 5
BACKOFF_S, BACKOFF_S_MAX = 2.0, 300.0
RETRYABLE = (TimeoutError, ConnectionError)


@dataclass(frozen=True)
class Step:
    name: str
    before: str  # the state the step starts from
    working: str
    done: str
    run: Callable[["Call", dict[str, Any], dict[str, Any]], tuple[Any, float]]  # (call, payload, memos) -> (output, cost)
    effects: tuple[str, ...] = ()  # kinds the output's dict sends through the outbox


@dataclass(frozen=True)
class Call:
    """What a step is told about itself."""

    job_id: str
    step: str
    worker_id: str


def table(steps: list[Step]) -> dict[str, tuple[str, ...]]:
    """The state table as data: each step's before -> working -> done, back on a retry, and failure."""
    out: dict[str, tuple[str, ...]] = {FINAL: (), FAILED: ()}
    for s in steps:
        out[s.before] = out.get(s.before, ()) + (s.working, FAILED)
        out[s.working] = (s.done, s.before, FAILED)
    out[steps[-1].done] = (FINAL, FAILED)
    return out


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=5, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.executescript(SCHEMA)
    return conn


class Engine:
    def __init__(self, conn: sqlite3.Connection, steps: list[Step], *, worker_id: str, clock: Callable[[], float],
                 lease_s: float = 30.0, rng: random.Random | None = None) -> None:
        self.conn, self.steps, self.worker_id, self.clock, self.lease_s = conn, steps, worker_id, clock, lease_s
        self.rng = rng or random.Random()

    def submit(self, job_id: str, payload: Any) -> None:
        now = self.clock()
        self.conn.execute("INSERT INTO job (id, state, payload, next_run_at, created, updated) VALUES (?, ?, ?, ?, ?, ?) "
                          "ON CONFLICT (id) DO NOTHING", (job_id, FIRST, json.dumps(payload, sort_keys=True), now, now, now))

    def claim(self) -> tuple[str, str, Any, int] | None:
        now = self.clock()
        row = self.conn.execute(
            "UPDATE job SET lease_owner = ?, lease_until = ?, attempts = attempts + 1, updated = ? WHERE id = ("
            " SELECT id FROM job WHERE state NOT IN (?, ?) AND next_run_at <= ? AND (lease_until IS NULL OR lease_until <= ?)"
            " ORDER BY next_run_at LIMIT 1) RETURNING id, state, payload, attempts",
            (self.worker_id, now + self.lease_s, now, FINAL, FAILED, now, now)).fetchone()
        return None if row is None else (row[0], row[1], json.loads(row[2]), row[3])

    def _move(self, job_id: str, old: str, new: str, **columns: Any) -> bool:
        sets = "".join(f", {name} = ?" for name in columns)
        cur = self.conn.execute(f"UPDATE job SET state = ?, updated = ?{sets} WHERE id = ? AND state = ?",
                                (new, self.clock(), *columns.values(), job_id, old))
        return cur.rowcount == 1

    def run_once(self) -> str:
        try:
            return self._run_once()
        except sqlite3.OperationalError as exc:  # another process holds the write lock: try later
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            if "locked" in str(exc) or "busy" in str(exc):
                return "busy"
            raise

    def _run_once(self) -> str:
        claimed = self.claim()
        if claimed is None:
            return "idle"
        job_id, state, payload, attempts = claimed
        if attempts > ATTEMPTS_MAX:
            self._move(job_id, state, FAILED, last_error="gave up: claimed too often", lease_owner=None, lease_until=None)
            return "failed"
        memos = {s: json.loads(o) for s, o in self.conn.execute("SELECT step, output FROM step_result WHERE job_id = ?", (job_id,))}
        for step in self.steps:
            if state not in (step.before, step.working):
                continue
            if state == step.before and not self._move(job_id, step.before, step.working):
                return "lease_lost"
            if step.name not in memos:
                try:
                    output, cost = step.run(Call(job_id, step.name, self.worker_id), payload, memos)
                except RETRYABLE as exc:
                    delay = self.rng.uniform(0, min(BACKOFF_S_MAX, BACKOFF_S * 2 ** attempts))
                    self._move(job_id, step.working, step.before, next_run_at=self.clock() + delay, last_error=str(exc),
                               lease_owner=None, lease_until=None)
                    return "retry"
                except Exception as exc:
                    self._move(job_id, step.working, FAILED, last_error=f"{type(exc).__name__}: {exc}", lease_owner=None, lease_until=None)
                    return "failed"
                memos[step.name] = output
                self.conn.execute("BEGIN IMMEDIATE")
                if self.conn.execute("INSERT INTO step_result (job_id, step, output, cost, at) VALUES (?, ?, ?, ?, ?) "
                                     "ON CONFLICT DO NOTHING", (job_id, step.name, json.dumps(output, sort_keys=True), cost,
                                                                self.clock())).rowcount == 0:
                    self.conn.execute("ROLLBACK")  # another worker finished this step meanwhile
                    return "lease_lost"
                for kind in step.effects:
                    self.conn.execute("INSERT INTO outbox (job_id, kind, payload) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                                      (job_id, kind, json.dumps(output[kind], sort_keys=True)))
                if not self._move(job_id, step.working, step.done):
                    self.conn.execute("ROLLBACK")
                    return "lease_lost"
                self.conn.execute("COMMIT")
            elif not self._move(job_id, step.working, step.done):
                return "lease_lost"
            state = step.done
        result = json.dumps(memos[self.steps[-1].name], sort_keys=True)
        self._move(job_id, state, FINAL, result=result, lease_owner=None, lease_until=None)
        return "done"


def send_outbox(conn: sqlite3.Connection, deliver: Callable[[str, str, Any], None], now: float) -> int:
    """Deliver every unsent outbox row under the key ``<job>:<kind>``; mark it sent after."""
    sent = 0
    try:
        for row_id, job_id, kind, payload in conn.execute(
                "SELECT id, job_id, kind, payload FROM outbox WHERE sent_at IS NULL ORDER BY id").fetchall():
            try:
                deliver(f"{job_id}:{kind}", kind, json.loads(payload))
            except RETRYABLE:
                conn.execute("UPDATE outbox SET attempts = attempts + 1 WHERE id = ?", (row_id,))
                continue
            conn.execute("UPDATE outbox SET sent_at = ?, attempts = attempts + 1 WHERE id = ?", (now, row_id))
            sent += 1
    except sqlite3.OperationalError as exc:  # the database is locked: the next pass sends the rest
        if "locked" not in str(exc) and "busy" not in str(exc):
            raise
    return sent
