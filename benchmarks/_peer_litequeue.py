"""litequeue: a small SQLite queue, one job per message (put, pop, done).

A queue, not a workflow engine: the four steps run inside one message's processing, with no
checkpoint between them. litequeue sets WAL and ``synchronous=NORMAL`` itself; for FULL the
benchmark changes it on litequeue's connection after it opens.

Runs in its own process (see :mod:`benchmarks._isolated`).
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

from . import _steps

__all__ = ["measure", "NOTE"]

NOTE = "1 message per job: put, pop, 4 steps, done"


def measure(jobs: int, runs: int, synchronous: str) -> dict[str, Any]:
    """Jobs per second (put -> done), one figure per run."""
    from litequeue import LiteQueue

    rates = []
    for run in range(runs):
        queue = LiteQueue(os.path.join(tempfile.mkdtemp(prefix="crashgate-bench-lq-"), "queue.db"))
        queue.conn.execute(f"PRAGMA synchronous={synchronous}")  # NORMAL or FULL, set by the caller
        ids = [f"doc-{run}-{i}" for i in range(jobs)]
        delivered = []
        started = time.perf_counter()
        for job_id in ids:
            queue.put(job_id)
        for _ in range(jobs):
            message = queue.pop()
            delivered.append(_steps.one_step(message.data)["key"])
            queue.done(message.message_id)
        rates.append(jobs / (time.perf_counter() - started))
        sync = queue.conn.execute("PRAGMA synchronous").fetchone()[0]
        queue.conn.close()
        if len(delivered) != jobs:
            raise AssertionError(f"litequeue delivered {len(delivered)} of {jobs} jobs")
    return {"rates": rates, "synchronous": sync}
