"""litequeue: a small SQLite queue, one job per message (put, pop, done).

A queue, not a workflow engine: the four steps run inside one message's processing, with no
checkpoint between them. litequeue sets WAL and ``synchronous=NORMAL`` itself; for FULL the
benchmark changes it on litequeue's connection after it opens.

Runs in its own process (see :mod:`benchmarks._isolated`).
"""

from __future__ import annotations

import os
import time

from . import _steps
from ._measure import scratch

__all__ = ["Session", "NOTE"]

NOTE = "1 message per job: put, pop, 4 steps, done"


class Session:
    """Each :meth:`run` puts ``jobs`` messages on a new queue, then pops, processes and marks them."""

    def __init__(self, synchronous: str) -> None:
        self.synchronous = synchronous
        self._next = 0
        self.info = {"synchronous": synchronous}

    def run(self, jobs: int) -> float:
        from litequeue import LiteQueue

        queue = LiteQueue(os.path.join(scratch("crashgate-bench-lq-"), "queue.db"))
        queue.conn.execute(f"PRAGMA synchronous={self.synchronous}")  # NORMAL or FULL, set by the caller
        ids = [f"doc-{self._next + i}" for i in range(jobs)]
        self._next += jobs
        delivered = []
        started = time.perf_counter()
        for job_id in ids:
            queue.put(job_id)
        for _ in range(jobs):
            message = queue.pop()
            delivered.append(_steps.one_step(message.data)["key"])
            queue.done(message.message_id)
        rate = jobs / (time.perf_counter() - started)
        queue.conn.close()
        if len(delivered) != jobs:
            raise AssertionError(f"litequeue delivered {len(delivered)} of {jobs} jobs")
        return rate

    def close(self) -> None:
        return None
