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
import tempfile
import time
from typing import Any

from . import _steps

__all__ = ["measure", "NOTE"]

NOTE = "4 @DBOS.step in 1 @DBOS.workflow; WAL+sync set by connect hook"
WARMUP_JOBS = 20


def measure(jobs: int, runs: int, synchronous: str) -> dict[str, Any]:
    """Workflows per second, one figure per run, all in one launched DBOS."""
    import sqlalchemy as sa
    from dbos import DBOS, SetWorkflowID

    @sa.event.listens_for(sa.engine.Engine, "connect")
    def _pragmas(dbapi_conn: Any, record: Any) -> None:
        dbapi_conn.execute("PRAGMA journal_mode=WAL")
        dbapi_conn.execute(f"PRAGMA synchronous={synchronous}")  # NORMAL or FULL, set by the caller

    logging.getLogger("dbos").setLevel(logging.WARNING)
    directory = tempfile.mkdtemp(prefix="crashgate-bench-dbos-")
    path = os.path.join(directory, "dbos-system.db")
    DBOS(config={"name": "crashgate-bench", "system_database_url": f"sqlite:///{path}", "run_admin_server": False, "log_level": "WARNING"})

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
    try:
        journal = _journal_mode(path)
        for i in range(WARMUP_JOBS):
            with SetWorkflowID(f"warmup-{i}"):
                document(f"warmup-{i}")
        rates = []
        for run in range(runs):
            started = time.perf_counter()
            for i in range(jobs):
                job_id = f"doc-{run}-{i}"
                with SetWorkflowID(job_id):
                    out = document(job_id)
                if out["key"] != f"{job_id}:delivery":
                    raise AssertionError(f"workflow {job_id} returned {out!r}")
            rates.append(jobs / (time.perf_counter() - started))
        return {"rates": rates, "journal_mode": journal}
    finally:
        DBOS.destroy()


def _journal_mode(path: str) -> str:
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        conn.close()
