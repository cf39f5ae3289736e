"""persist-queue's SQLiteAckQueue: a durable queue, one job per item (put, get, ack).

A queue, not a workflow engine: the four steps run inside one item's processing, with no
checkpoint between them. persist-queue opens WAL but leaves ``synchronous`` at SQLite's default
(FULL); a subclass sets the requested level on each connection it opens.

Runs in its own process (see :mod:`benchmarks._isolated`).
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
from typing import Any

from . import _steps

__all__ = ["measure", "NOTE"]

NOTE = "1 item per job: put, get, 4 steps, ack; sync set per connection"


def measure(jobs: int, runs: int, synchronous: str) -> dict[str, Any]:
    """Jobs per second (put -> acked), one figure per run."""
    from persistqueue import SQLiteAckQueue

    class Queue(SQLiteAckQueue):  # type: ignore[misc]
        def _new_db_connection(self, path: str, multithreading: bool, timeout: float) -> sqlite3.Connection:
            conn = super()._new_db_connection(path, multithreading, timeout)
            conn.execute(f"PRAGMA synchronous={synchronous}")  # NORMAL or FULL, set by the caller
            return conn

    rates = []
    for run in range(runs):
        queue = Queue(tempfile.mkdtemp(prefix="crashgate-bench-pq-"), auto_resume=False)
        ids = [f"doc-{run}-{i}" for i in range(jobs)]
        delivered = []
        started = time.perf_counter()
        for job_id in ids:
            queue.put(job_id)
        for _ in range(jobs):
            item = queue.get(block=False, raw=True)
            delivered.append(_steps.one_step(item["data"])["key"])
            queue.ack(id=item["pqid"])
        rates.append(jobs / (time.perf_counter() - started))
        sync = queue._getter.execute("PRAGMA synchronous").fetchone()[0]
        queue.close()
        if len(delivered) != jobs:
            raise AssertionError(f"persist-queue delivered {len(delivered)} of {jobs} jobs")
    return {"rates": rates, "synchronous": sync}
