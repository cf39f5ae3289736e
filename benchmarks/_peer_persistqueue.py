"""persist-queue's SQLiteAckQueue: a durable queue, one job per item (put, get, ack).

A queue, not a workflow engine: the four steps run inside one item's processing, with no
checkpoint between them. persist-queue opens WAL but leaves ``synchronous`` at SQLite's default
(FULL); a subclass sets the requested level on each connection it opens.

Runs in its own process (see :mod:`benchmarks._isolated`).
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from . import _steps
from ._measure import scratch

__all__ = ["Session", "NOTE"]

NOTE = "1 item per job: put, get, 4 steps, ack; sync set per connection"


class Session:
    """Each :meth:`run` puts ``jobs`` items on a new queue, then gets, processes and acks them."""

    def __init__(self, synchronous: str) -> None:
        from persistqueue import SQLiteAckQueue

        class Queue(SQLiteAckQueue):  # type: ignore[misc]
            def _new_db_connection(self, path: str, multithreading: bool, timeout: float) -> sqlite3.Connection:
                conn = super()._new_db_connection(path, multithreading, timeout)
                conn.execute(f"PRAGMA synchronous={synchronous}")  # NORMAL or FULL, set by the caller
                return conn

        self._queue_class = Queue
        self._next = 0
        probe = Queue(scratch("crashgate-bench-pq-"), auto_resume=False)
        self.info = {"synchronous": probe._getter.execute("PRAGMA synchronous").fetchone()[0]}
        probe.close()

    def run(self, jobs: int) -> float:
        queue: Any = self._queue_class(scratch("crashgate-bench-pq-"), auto_resume=False)
        ids = [f"doc-{self._next + i}" for i in range(jobs)]
        self._next += jobs
        delivered = []
        started = time.perf_counter()
        for job_id in ids:
            queue.put(job_id)
        for _ in range(jobs):
            item = queue.get(block=False, raw=True)
            delivered.append(_steps.one_step(item["data"])["key"])
            queue.ack(id=item["pqid"])
        rate = jobs / (time.perf_counter() - started)
        queue.close()
        if len(delivered) != jobs:
            raise AssertionError(f"persist-queue delivered {len(delivered)} of {jobs} jobs")
        return rate

    def close(self) -> None:
        return None
