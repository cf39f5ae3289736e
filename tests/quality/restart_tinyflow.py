"""tinyflow recovering by restart: a worker claims a job that is free or already its own, and a
lease never expires, so a dead worker's job comes back only when that worker (by its id) starts
again, as engines that recover an executor's unfinished work on its restart do. Gated with the
default recovery (lease expiry, then a worker of a new identity), every job the doomed worker
held stays held; declared ``recovery = "restart"``, the harness restarts the dead worker.
Importable by the matrix's workers with ``examples/minimal_engine`` on the path."""

from __future__ import annotations

import json
from typing import Any

import crash
import tinyflow

HERE = __file__


class RestartEngine(tinyflow.Engine):
    def claim(self) -> tuple[str, str, Any, int] | None:
        now = self.clock()
        row = self.conn.execute(
            "UPDATE job SET lease_owner = ?, lease_until = ?, attempts = attempts + 1, updated = ? WHERE id = ("
            " SELECT id FROM job WHERE state NOT IN (?, ?) AND next_run_at <= ? AND (lease_owner IS NULL OR lease_owner = ?)"
            " ORDER BY next_run_at LIMIT 1) RETURNING id, state, payload, attempts",
            (self.worker_id, now + self.lease_s, now, tinyflow.FINAL, tinyflow.FAILED, now, self.worker_id)).fetchone()
        return None if row is None else (row[0], row[1], json.loads(row[2]), row[3])


class RestartSession(crash.TinyflowSession):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        old = self.engine
        self.engine = RestartEngine(old.conn, old.steps, worker_id=old.worker_id, clock=old.clock, lease_s=old.lease_s, rng=old.rng)


class LeaseExpiryRestart(crash.TinyflowAdapter):
    """The restarting engine gated as if a lease expired (the default recovery)."""

    name = "tinyflow-restart"

    def trace_paths(self) -> list[str]:
        return super().trace_paths() + [HERE]

    def open(self, db: str, world: Any, *, worker_id: str, clock: Any, rng: Any) -> RestartSession:
        return RestartSession(db, world, worker_id, clock, rng, self.lease_s)


class DeclaredRestart(LeaseExpiryRestart):
    """The same engine, declared: a dead worker's work comes back when it restarts."""

    recovery = "restart"
