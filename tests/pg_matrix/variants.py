"""Planted bugs of tests/quality/variants.py re-expressed on PostgreSQL, and two that only a held
lock reveals there (the PostgreSQL twins of tests/quality/machine_variants.py's lock bug).

Each is :class:`~chaos.adapters.postgres.PostgresReferenceAdapter` broken the same way as its SQLite
twin, so the crash matrix on PostgreSQL must catch it with the same invariant. The lock bugs pass
the crash matrix and are caught by ``worker-survives`` under the ``lock`` fault.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import psycopg

from chaos.adapters.postgres import PostgresReferenceAdapter
from engine import Claim, Completion, PostgresStore, RunResult, StoreBusy, Worker, Workflow
try:
    from quality import variants as sqlite_variants  # as pytest imports it (tests/ on sys.path)
except ImportError:  # python -m chaos matrix --target tests.pg_matrix.variants:SplitMemo --db ...
    from tests.quality import variants as sqlite_variants

HERE = os.path.abspath(__file__)
SQL = PostgresStore.sql


class _Variant(PostgresReferenceAdapter):
    """A PostgreSQL reference adapter whose planted code is traced for crash points too."""

    catches: tuple[str, ...] = ()
    families: tuple[str, ...] = ()

    def trace_paths(self) -> list[str]:
        return super().trace_paths() + [HERE, sqlite_variants.HERE]


class _AdvanceThenMemoStore(PostgresStore):
    def complete(self, claim: Any, completion: Completion) -> bool:
        if not super().complete(claim, replace(completion, effects={}, write_memo=False)):
            return False
        with self._write() as conn:  # BUG: a second transaction
            if completion.write_memo:
                conn.execute(SQL.INSERT_MEMO, {"id": claim.job_id, "step": completion.step, "output": completion.output_json, "cost": completion.cost_usd, "now": completion.now})
                for kind, payload_json in completion.effects.items():
                    conn.execute(SQL.INSERT_OUTBOX, {"id": claim.job_id, "kind": kind, "payload": payload_json, "now": completion.now})
        return True


class SplitMemo(_Variant):
    """The memo committed in a second transaction after the state advance (SplitMemo on SQLite).
    Caught by **progress-recorded**."""

    catches = ("progress-recorded",)
    families = ("clean",)
    bug_line = "with self._write() as conn:  # BUG: a second transaction"

    def make_store(self, db_path: str) -> PostgresStore:
        return _AdvanceThenMemoStore(db_path)


class MarkBeforeSend(_Variant):
    """The outbox row marked sent before it is sent (MarkBeforeSend on SQLite). Caught by
    **outbox-at-least-once**."""

    catches = ("outbox-at-least-once",)
    families = ("sender",)
    bug_line = "for row in rows:"

    def send_outbox_fn(self) -> Any:
        return sqlite_variants._mark_then_send


PLANTED = (SplitMemo, MarkBeforeSend)


# -- bugs only a held lock reveals ------------------------------------------------------------------
class _MachineVariant(_Variant):
    faults: tuple[str, ...] = ()
    worker_class: type[Worker] = Worker

    def make_worker(self, store: Any, workflow: Workflow, **kw: Any) -> Worker:
        return self.worker_class(store, workflow, lease_s=self.lease_s, threaded=False, **kw)


class _ClaimLeftOpenStore(PostgresStore):
    def claim(self, owner: str, *, now: float, lease_s: float, starts: Any) -> Any:
        try:
            self.conn.execute("BEGIN")
            row = self.conn.execute(SQL.CLAIM, {"owner": owner, "until": now + lease_s, "now": now}).fetchone()
            claim = None if row is None else _start(self.conn, row, now, lease_s, starts)
            self.conn.execute("COMMIT")
            return claim
        except psycopg.Error:
            return None  # BUG: a lock timeout read as "no work", and the aborted transaction left open


def _start(conn: Any, row: Any, now: float, lease_s: float, starts: Any) -> Claim:
    job_id, state, payload, attempts, token, *_ = row  # the claim also says whether the job has memo rows
    ident = {"id": job_id, "token": token, "now": now}
    if state in starts:
        conn.execute(SQL.FENCED_MOVE, {**ident, "to": starts[state], "from": state})
        state = starts[state]
    else:
        conn.execute(SQL.COUNT_RECLAIM, {**ident, "state": state})
        attempts += 1
    return Claim(job_id, state, payload, attempts, token, now + lease_s)


class LockTimeoutMeansNoWork(_MachineVariant):
    """A claim that reads a lock timeout as "no work" and leaves its transaction open
    (BusyMeansNoWork on SQLite).

    The claim opens its own transaction and turns any database error into an empty queue. The
    first time another session holds the job table (a migration's ``ALTER TABLE``, a backup tool's
    ``LOCK TABLE``, a long ``UPDATE``), the claim's UPDATE times out, the transaction is aborted
    and never rolled back: every later statement on that connection fails with "current
    transaction is aborted", which the claim reads as no work again, and the outbox pass on the
    same connection raises. Caught by **worker-survives** under ``lock-held``.
    """

    catches = ("worker-survives",)
    families = ("backlog",)
    faults = ("lock",)

    def make_store(self, db_path: str) -> PostgresStore:
        return _ClaimLeftOpenStore(db_path)


class _BusyIsFatalWorker(Worker):
    def run_once(self) -> RunResult:
        result = super().run_once()
        if result.outcome == "busy":
            raise StoreBusy(f"job {result.job_id!r}: the database is locked")  # BUG: "locks never last", so let it crash
        return result


class DiesOnLockTimeout(_MachineVariant):
    """A worker loop that dies on the first lock timeout (DiesOnDiskError's twin, for locks).

    The author treated ``busy`` as impossible ("our transactions are short") and raised it out of
    the loop. In production the first long lock another session takes (a migration, a
    ``VACUUM FULL``, a report holding ``FOR UPDATE``) stops every job this worker would have
    processed. Caught by **worker-survives** under ``lock-held``.
    """

    catches = ("worker-survives",)
    families = ("backlog",)
    faults = ("lock",)
    worker_class = _BusyIsFatalWorker


MACHINE_PLANTED = (LockTimeoutMeansNoWork, DiesOnLockTimeout)
