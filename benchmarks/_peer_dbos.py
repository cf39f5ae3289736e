"""DBOS Transact on a SQLite system database: the same four steps as one durable workflow.

Each workflow is started with its own id (DBOS's idempotency key, like a crashgate job id) and
runs to completion in the calling thread; DBOS checkpoints the workflow's start, every step's
output and the final status in the system database. DBOS opens SQLite in its default rollback
journal; a SQLAlchemy connect hook (set only in this process) switches every connection to WAL and
the requested ``synchronous`` level, so DBOS runs on the same settings as crashgate.

Runs in its own process (see :mod:`benchmarks._isolated`): DBOS is a process-wide singleton.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from typing import Any

from . import _steps
from ._measure import scratch

__all__ = ["Session", "NOTE"]

NOTE = "4 @DBOS.step in 1 @DBOS.workflow; WAL and sync set by a connect hook"
WARMUP_JOBS = 20


class Session:
    """One launched DBOS; each :meth:`run` starts and finishes ``jobs`` workflows."""

    def __init__(self, synchronous: str) -> None:
        import sqlalchemy as sa
        from dbos import DBOS

        @sa.event.listens_for(sa.engine.Engine, "connect")
        def _pragmas(dbapi_conn: Any, record: Any) -> None:
            dbapi_conn.execute("PRAGMA journal_mode=WAL")
            dbapi_conn.execute(f"PRAGMA synchronous={synchronous}")  # NORMAL or FULL, set by the caller

        logging.getLogger("dbos").setLevel(logging.WARNING)
        path = os.path.join(scratch("crashgate-bench-dbos-"), "dbos-system.db")
        config = {"name": "crashgate-bench", "system_database_url": f"sqlite:///{path}", "log_level": "WARNING"}
        DBOS(config=config)  # type: ignore[arg-type]

        @DBOS.step()
        def fetch(source: str) -> dict[str, Any]:
            return _steps.fetch(source)

        @DBOS.step()
        def extract(fetched: dict[str, Any]) -> dict[str, Any]:
            return _steps.extract(fetched)

        @DBOS.step()
        def verify(extracted: dict[str, Any]) -> dict[str, Any]:
            return _steps.verify(extracted)

        @DBOS.step()
        def deliver(job_id: str, verified: dict[str, Any]) -> dict[str, Any]:
            return _steps.deliver(job_id, verified)

        @DBOS.workflow()
        def document(job_id: str) -> dict[str, Any]:
            return deliver(job_id, verify(extract(fetch(job_id))))

        DBOS.launch()
        self._dbos = DBOS
        self._document = document
        self._next = 0
        self._start(WARMUP_JOBS)
        self.info = {"journal_mode": _pragma(path, "journal_mode"), "synchronous": synchronous}

    def run(self, jobs: int) -> float:
        started = time.perf_counter()
        self._start(jobs)
        return jobs / (time.perf_counter() - started)

    def close(self) -> None:
        self._dbos.destroy()

    def _start(self, jobs: int) -> None:
        from dbos import SetWorkflowID

        for _ in range(jobs):
            job_id = f"doc-{self._next}"
            self._next += 1
            with SetWorkflowID(job_id):
                out = self._document(job_id)
            if out["key"] != f"{job_id}:delivery":
                raise AssertionError(f"workflow {job_id} returned {out!r}")


def _pragma(path: str, name: str) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute(f"PRAGMA {name}").fetchone()[0])  # a constant name
    finally:
        conn.close()
