"""Planted bugs that only a fault of the machine reveals: a full disk, a held lock, a clock jump, a damaged row.

Each variant passes the crash matrix: nothing goes wrong while the machine behaves. Its docstring
says what the bug is, what goes wrong in production, and which check catches it under which fault.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import replace
from typing import Any

from chaos import ReferenceAdapter
from engine import Completion, RunResult, SqliteStore, StoreFailed, Worker, Workflow

from .variants import _start

HERE = os.path.abspath(__file__)
CLAIM = SqliteStore.sql.CLAIM


class _Variant(ReferenceAdapter):
    """A reference adapter whose planted code (this file) is traced for crash points too."""

    catches: tuple[str, ...] = ()
    families: tuple[str, ...] = ()
    faults: tuple[str, ...] = ()

    def trace_paths(self) -> list[str]:
        return super().trace_paths() + [HERE]

    def _worker(self, cls: type[Worker], store: Any, workflow: Workflow, **kw: Any) -> Worker:
        return cls(store, workflow, lease_s=self.lease_s, threaded=False, **kw)


# -- 1 -------------------------------------------------------------------------------------------
class _LetItCrashWorker(Worker):
    def _store_failed(self, exc: StoreFailed, claim: Any) -> RunResult:
        raise exc.__cause__ or exc  # BUG: "a supervisor restarts us" -- there is none


class DiesOnDiskError(_Variant):
    """A worker loop that dies on the first ``sqlite3.OperationalError`` (disk full, I/O error).

    The author let database errors propagate, trusting a supervisor to restart the process. In
    production nobody does: the first full disk stops every job this worker would have processed.
    Caught by **worker-survives** under ``disk-full`` (and the io faults).
    """

    catches = ("worker-survives",)
    families = ("backlog",)
    faults = ("disk",)

    def make_worker(self, store: Any, workflow: Workflow, **kw: Any) -> Worker:
        return self._worker(_LetItCrashWorker, store, workflow, **kw)


# -- 2 -------------------------------------------------------------------------------------------
class _DeferredClaimStore(SqliteStore):
    def claim(self, owner: str, *, now: float, lease_s: float, starts: Any) -> Any:
        try:
            self.conn.execute("BEGIN")  # deferred: the write lock is asked for at the UPDATE
            row = self.conn.execute(CLAIM, {"owner": owner, "until": now + lease_s, "now": now}).fetchone()
            claim = None if row is None else _start(self.conn, row, now, lease_s, starts)
            self.conn.execute("COMMIT")
            return claim
        except sqlite3.OperationalError:
            return None  # BUG: "locked" read as "no work", and the transaction is left open


class BusyMeansNoWork(_Variant):
    """A claim that treats ``SQLITE_BUSY`` as "no work", forever.

    The claim runs in a deferred transaction and reads any ``OperationalError`` as an empty
    queue. The first time another process holds the write lock (a backup, a migration, a frozen
    peer), the UPDATE fails with SQLITE_BUSY and the transaction is left open: every later claim
    then fails at its BEGIN, and the worker idles for good while jobs pile up. Caught by
    **worker-survives** under ``lock-held``: the worker lives, but never resumes.
    """

    catches = ("worker-survives",)
    families = ("backlog",)
    faults = ("lock",)

    def make_store(self, db_path: str) -> SqliteStore:
        return _DeferredClaimStore(db_path)


# -- 3 -------------------------------------------------------------------------------------------
class _ParseFirstWorker(Worker):
    def _advance(self, claim: Any, step: Any, memos: Any) -> Any:
        json.loads(claim.payload_json)  # BUG: a parse error escapes the loop instead of quarantining the job
        return super()._advance(claim, step, memos)


class PayloadCrashesLoop(_Variant):
    """A payload parse error that crashes the worker loop instead of quarantining the job.

    One row that is not JSON (a bad manual fix, a bit flip, a buggy producer) takes the worker
    down, and every restart takes the same job first and dies again: a poison row stops the whole
    queue. Caught by **worker-survives** and **quarantined** under ``damage-payload``.
    """

    catches = ("worker-survives", "quarantined")
    families = ("backlog",)
    faults = ("damage-payload",)

    def make_worker(self, store: Any, workflow: Workflow, **kw: Any) -> Worker:
        return self._worker(_ParseFirstWorker, store, workflow, **kw)


# -- 4 -------------------------------------------------------------------------------------------
CURRENT_TOKEN = "SELECT lease_token FROM job WHERE id = ?"


class _LeaseByClockStore(SqliteStore):
    def complete(self, claim: Any, completion: Completion) -> bool:
        if completion.now < claim.lease_until:  # BUG: "my lease is valid by my clock", so the token need not match
            current = self.conn.execute(CURRENT_TOKEN, (claim.job_id,)).fetchone()[0]
            claim = replace(claim, token=current)
        return super().complete(claim, completion)


class LeaseCheckedByClock(_Variant):
    """A lease check using a clock that can move backwards.

    The completion trusts the worker's own clock: while ``now < lease_until`` it writes whatever
    the fencing token says. A worker frozen past its lease, whose clock then stepped back (an NTP
    step, a VM restored from a snapshot), believes its lease again and commits over the worker
    that took the job over. Pauses and interleavings do not show it (a frozen worker's clock moves
    on with everyone's); ``clock-skew`` does: **fenced-writes**.
    """

    catches = ("fenced-writes",)
    families = ("clean",)
    faults = ("clock-skew",)

    def make_store(self, db_path: str) -> SqliteStore:
        return _LeaseByClockStore(db_path)


MACHINE = (DiesOnDiskError, BusyMeansNoWork, PayloadCrashesLoop, LeaseCheckedByClock)
