"""huey's SqliteHuey: the four steps as a chained pipeline of tasks, or as one task per job.

The worker side is the loop huey's consumer runs for each task (``dequeue`` then ``execute``),
driven directly so no polling sleep is measured. Results are stored (huey's default), which is
what passes each step's output to the next task of the pipeline. huey's own ``fsync`` option
offers only FULL or OFF, so a storage subclass sets the requested ``synchronous`` level on each
connection instead; the journal is WAL, huey's default.

Runs in its own process (see :mod:`benchmarks._isolated`).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from . import _steps
from ._measure import scratch

__all__ = ["Session", "NOTE_CHAINED", "NOTE_ONE_STEP"]

NOTE_CHAINED = "fetch.s().then(...) x4; dequeue+execute loop; sync set per connection"
NOTE_ONE_STEP = "1 task per job doing all 4 steps; no per-step checkpoint"
LOOP_MAX_PER_JOB = 10


class Session:
    """One SqliteHuey; each :meth:`run` enqueues ``jobs`` jobs and drains the queue."""

    def __init__(self, synchronous: str, chained: bool) -> None:
        from huey import SqliteHuey
        from huey.storage import SqliteStorage

        class Storage(SqliteStorage):  # type: ignore[misc]
            def _create_connection(self) -> Any:
                conn = super()._create_connection()
                conn.execute(f"PRAGMA synchronous={synchronous}")  # NORMAL or FULL, set by the caller
                return conn

        logging.getLogger("huey").setLevel(logging.CRITICAL)  # a failed task fails the run below
        path = os.path.join(scratch("crashgate-bench-huey-"), "huey.db")
        self.huey = huey = SqliteHuey("bench", filename=path, storage_class=Storage)
        self.chained = chained
        self.delivered: list[str] = []
        self._next = 0

        # A task's return value is handed to the next task of the pipeline; huey spreads a tuple
        # into positional and a dict into keyword arguments, so each step passes [job_id, output].
        @huey.task()
        def fetch(job_id: str) -> list[Any]:
            return [job_id, _steps.fetch(job_id)]

        @huey.task()
        def extract(previous: list[Any]) -> list[Any]:
            return [previous[0], _steps.extract(previous[1])]

        @huey.task()
        def verify(previous: list[Any]) -> list[Any]:
            return [previous[0], _steps.verify(previous[1])]

        @huey.task()
        def deliver(previous: list[Any]) -> str:
            out = _steps.deliver(previous[0], previous[1])
            self.delivered.append(out["key"])
            return out["key"]

        @huey.task()
        def one_step(job_id: str) -> str:
            out = _steps.one_step(job_id)
            self.delivered.append(out["key"])
            return out["key"]

        self._tasks = (fetch, extract, verify, deliver, one_step)
        self.info = {"journal_mode": "wal", "synchronous": huey.storage.conn.execute("PRAGMA synchronous").fetchone()[0]}

    def run(self, jobs: int) -> float:
        fetch, extract, verify, deliver, one_step = self._tasks
        self.delivered.clear()
        ids = [f"doc-{self._next + i}" for i in range(jobs)]
        self._next += jobs
        started = time.perf_counter()
        for job_id in ids:
            if self.chained:
                self.huey.enqueue(fetch.s(job_id).then(extract).then(verify).then(deliver))
            else:
                one_step(job_id)
        self._drain(jobs)
        rate = jobs / (time.perf_counter() - started)
        if sorted(self.delivered) != sorted(f"{job_id}:delivery" for job_id in ids):
            raise AssertionError(f"huey delivered {len(self.delivered)} of {jobs} jobs")
        return rate

    def close(self) -> None:
        self.huey.storage.close()

    def _drain(self, jobs: int) -> None:
        for _ in range(LOOP_MAX_PER_JOB * jobs + 10):
            task = self.huey.dequeue()
            if task is None:
                return
            self.huey.execute(task)
        raise AssertionError("huey queue not drained")
