"""What a worker process of the demo and the soak talks to: a paid model and the document source.

The paid model writes every call to a ledger (``calls.db``, a SQLite file outside the engine's
database) *before* the call's latency begins, so the record survives the worker's SIGKILL: a call
that was paid for and then lost with its worker is still counted. At the moment of each call a
probe reads the engine's database on a connection of its own: is this step's memo already
committed, and does the caller still hold the job's lease? That is what ``no-spend-after-memo``
checks afterwards.

The probe is the harness's, not the engine's: when it cannot read the database (the server
restarting, its backends terminated) it reconnects and waits, as the engine's store does. If it
still cannot, the call is not made (nothing is paid), the step fails as a connection failure that
the engine retries, and the ledger records a *harness error*: the run's verdict is then a failure
of the harness, never a pass, because a job the probe failed says nothing about the engine.

The document source is the receiver's ``GET /documents/<source>`` over real loopback HTTP.

>>> import tempfile, os
>>> ledger = CallLedger(os.path.join(tempfile.mkdtemp(), "calls.db"))
>>> ledger.abandoned("w1.0", "doc-1", "busy", at=10.0)
>>> ledger.abandons()
[('w1.0', 'doc-1', 'busy', 10.0)]
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable

from engine import ConnectionFailed, ModelReply, ServerError
from engine import local_answer

from chaos.core.ledger_file import open_ledger
from chaos.core.world import USD_PER_1K_CHARS, Call

__all__ = [
    "CallLedger",
    "LedgerModel",
    "HttpDocuments",
    "SqliteProbe",
    "PostgresProbe",
    "make_probe",
    "PG_PROBE_LEASE",
    "PG_PROBE_MEMO",
    "holds_lease",
    "ProbeFailed",
    "HARNESS_ERROR_PREFIX",
]

# What a step's error says when the harness's probe, not the engine, failed it.
HARNESS_ERROR_PREFIX = "chaos harness: the model probe could not read the database"

FETCH_TIMEOUT_S = 1.0

LEDGER_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS call (
        seq INTEGER PRIMARY KEY, job_id TEXT, step TEXT, task TEXT, worker TEXT, token INTEGER,
        at REAL, memo_committed INTEGER, lease_valid INTEGER, cost REAL)""",
    # A claim a worker left without committing the step it had paid for (busy, lease lost, retry).
    "CREATE TABLE IF NOT EXISTS abandon (seq INTEGER PRIMARY KEY, worker TEXT, job_id TEXT, outcome TEXT, at REAL)",
    # A model call the harness could not probe (its own connection to the database failed).
    "CREATE TABLE IF NOT EXISTS harness_error (seq INTEGER PRIMARY KEY, worker TEXT, job_id TEXT, step TEXT, at REAL, error TEXT)",
)
RECORD_CALL = (
    "INSERT INTO call (job_id, step, task, worker, token, at, memo_committed, lease_valid, cost) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
RECORD_ABANDON = "INSERT INTO abandon (worker, job_id, outcome, at) VALUES (?, ?, ?, ?)"
RECORD_HARNESS_ERROR = "INSERT INTO harness_error (worker, job_id, step, at, error) VALUES (?, ?, ?, ?, ?)"
SELECT_HARNESS_ERRORS = "SELECT worker, job_id, step, at, error FROM harness_error ORDER BY seq"
SELECT_CALLS = "SELECT seq, job_id, step, task, worker, token, at, memo_committed, lease_valid FROM call ORDER BY seq"
SELECT_ABANDONS = "SELECT worker, job_id, outcome, at FROM abandon ORDER BY seq"
SPEND = "SELECT COUNT(*), COALESCE(SUM(cost), 0) FROM call"
COST_PER_STEP = "SELECT job_id, step, MIN(cost) FROM call GROUP BY job_id, step"

# The probe's two reads, as in chaos.adapters.reference.Probe, for either backend.
PROBE_MEMO = "SELECT 1 FROM step_result WHERE job_id = ? AND step = ?"
PROBE_LEASE = "SELECT lease_owner, lease_until, lease_token FROM job WHERE id = ?"
PG_PROBE_MEMO = "SELECT 1 FROM step_result WHERE job_id = %s AND step = %s"
PG_PROBE_LEASE = "SELECT lease_owner, lease_until, lease_token FROM job WHERE id = %s"

Probe = Callable[[str, str, str, int, float], "tuple[bool, bool]"]


class CallLedger:
    """The paid model's ledger: one connection per process, shared by its threads under a lock."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.conn = open_ledger(path, LEDGER_SCHEMA)
        self.lock = threading.Lock()

    def record(self, ctx: Any, task: str, at: float, memo_committed: bool, lease_valid: bool, cost_usd: float) -> None:
        with self.lock:
            self.conn.execute(
                RECORD_CALL, (ctx.job_id, ctx.step, task, ctx.worker_id, ctx.token, at, memo_committed, lease_valid, cost_usd)
            )

    def abandoned(self, worker: str, job_id: str, outcome: str, at: float) -> None:
        with self.lock:
            self.conn.execute(RECORD_ABANDON, (worker, job_id, outcome, at))

    def harness_error(self, ctx: Any, at: float, error: str) -> None:
        with self.lock:
            self.conn.execute(RECORD_HARNESS_ERROR, (ctx.worker_id, ctx.job_id, ctx.step, at, error))

    def harness_errors(self) -> list[tuple[str, str, str, float, str]]:
        """(worker, job, step, at, error) of every model call the harness could not probe."""
        return [tuple(r) for r in self.conn.execute(SELECT_HARNESS_ERRORS)]  # type: ignore[misc]

    def calls(self) -> list[Call]:
        return [Call(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bool(r[7]), bool(r[8]), None) for r in self.conn.execute(SELECT_CALLS)]

    def abandons(self) -> list[tuple[str, str, str, float]]:
        return [tuple(r) for r in self.conn.execute(SELECT_ABANDONS)]  # type: ignore[misc]

    def spend(self) -> tuple[int, float]:
        """(paid calls, total cost in USD) over the whole run."""
        count, cost = self.conn.execute(SPEND).fetchone()
        return int(count), float(cost)

    def unit_costs(self) -> dict[tuple[str, str], float]:
        """The price of one call per (job, step): to price the calls that were paid twice."""
        return {(r[0], r[1]): float(r[2]) for r in self.conn.execute(COST_PER_STEP)}

    def close(self) -> None:
        self.conn.close()


class LedgerModel:
    """A paid model with a random latency whose every call is in the ledger before it starts.

    The answer is the offline model's (deterministic); the latency is ``uniform(lo, hi)`` ms,
    drawn from the worker's seeded RNG, spent *after* the call was recorded: a worker killed
    during that wait has paid for a call whose result is lost.
    """

    def __init__(self, ledger: CallLedger, probe: Probe, *, latency_ms: tuple[float, float], rng: random.Random, clock: Any) -> None:
        lo, hi = latency_ms
        if not 0 <= lo <= hi:
            raise ValueError(f"latency_ms={latency_ms!r} must be (lo, hi) with 0 <= lo <= hi")
        self.ledger = ledger
        self.probe = probe
        self.latency_ms = (float(lo), float(hi))
        self.rng = rng
        self.clock = clock

    def complete(self, ctx: Any, task: str, prompt: str) -> ModelReply:
        now = self.clock.now()
        try:
            memo_committed, lease_valid = self.probe(ctx.job_id, ctx.step, ctx.worker_id, ctx.token, now)
        except ProbeFailed as exc:
            # Not paid, not recorded as a call: the engine retries the step as after any
            # connection failure, and the verdict counts the harness's failure against the run.
            self.ledger.harness_error(ctx, now, str(exc))
            raise ConnectionFailed(f"{HARNESS_ERROR_PREFIX}: {exc}") from exc
        cost = round(len(prompt) / 1000 * USD_PER_1K_CHARS, 8)
        self.ledger.record(ctx, task, now, memo_committed, lease_valid, cost)
        time.sleep(self.rng.uniform(*self.latency_ms) / 1000)
        return ModelReply(local_answer(task, prompt), cost)


class HttpDocuments:
    """The fetch step's source: ``GET <base_url>/<source>`` on the loopback receiver."""

    def __init__(self, base_url: str, *, timeout_s: float = FETCH_TIMEOUT_S) -> None:
        if not base_url.startswith("http://127.0.0.1:"):
            raise ValueError(f"documents url {base_url!r} must be on loopback (http://127.0.0.1:PORT/...)")
        self.base_url = base_url
        self.timeout_s = timeout_s

    def fetch(self, ctx: Any, source: str) -> str:
        url = f"{self.base_url}/{urllib.parse.quote(source, safe='')}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as response:
                return response.read().decode()
        except urllib.error.HTTPError as exc:
            if exc.code >= 500:
                raise ServerError(f"document source answered {exc.code}", exc.code) from exc
            raise ConnectionFailed(f"document source answered {exc.code}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise ConnectionFailed(f"document source: {exc}") from exc


class SqliteProbe:
    """Reads the engine's committed state on a connection of its own (usable from any thread).

    Like :class:`chaos.adapters.reference.Probe`, but its connection may be used from the worker's step
    thread and from the fresh one that replaces it after a step timeout.
    """

    def __init__(self, db_path: str) -> None:
        self.conn = sqlite3.connect(db_path, timeout=30, check_same_thread=False)
        self.lock = threading.Lock()

    def __call__(self, job_id: str, step: str, worker_id: str, token: int, now: float) -> tuple[bool, bool]:
        with self.lock:
            memo = self.conn.execute(PROBE_MEMO, (job_id, step)).fetchone()
            lease = self.conn.execute(PROBE_LEASE, (job_id,)).fetchone()
        return memo is not None, holds_lease(lease, worker_id, token, now)

    def close(self) -> None:
        self.conn.close()


class ProbeFailed(RuntimeError):
    """The probe could not read the engine's database, even after reconnecting and waiting."""


class PostgresProbe:
    """The same two reads on PostgreSQL, on a connection of its own (autocommit: each read sees
    what is committed at that moment), opened on first use and again whenever the server drops it
    (:class:`chaos.adapters.postgres.RetryingReader`): a worker restarted while the server starts
    up, or one whose backend was terminated, waits for the server as the engine's store does."""

    def __init__(self, url: str, *, wait_s: float | None = None) -> None:
        from chaos.adapters.postgres import RECONNECT_WAIT_S, RetryingReader

        self.reader = RetryingReader(url, wait_s=RECONNECT_WAIT_S if wait_s is None else wait_s)
        self.lock = threading.Lock()

    def __call__(self, job_id: str, step: str, worker_id: str, token: int, now: float) -> tuple[bool, bool]:
        import psycopg

        def reads(conn: Any) -> tuple[Any, Any]:
            return conn.execute(PG_PROBE_MEMO, (job_id, step)).fetchone(), conn.execute(PG_PROBE_LEASE, (job_id,)).fetchone()

        with self.lock:
            try:
                memo, lease = self.reader.read(reads)
            except psycopg.Error as exc:
                raise ProbeFailed(f"{type(exc).__name__}: {' '.join(str(exc).split())}") from exc
        return memo is not None, holds_lease(lease, worker_id, token, now)

    def close(self) -> None:
        self.reader.close()


def holds_lease(lease: Any, worker_id: str, token: int, now: float) -> bool:
    return lease is not None and lease[0] == worker_id and lease[2] == token and (lease[1] or 0) > now


def make_probe(db: str) -> SqliteProbe | PostgresProbe:
    """The probe for a database path or URL."""
    if db.startswith(("postgresql://", "postgres://")):
        return PostgresProbe(db)
    return SqliteProbe(db[len("sqlite:///"):] if db.startswith("sqlite:///") else db)
