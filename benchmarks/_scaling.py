"""Scaling: does a claim, and the throughput behind it, stay flat as the table grows?

Three databases: a small backlog of queued jobs, a large backlog, and the small backlog next to
a large number of finished jobs (each with its four memo rows and a sent outbox row, written
directly in their final shape by SQL, since only their presence matters). Each measurement first
tops the backlog up to its size, then times single claims one by one, then runs jobs through
``Worker.run_once`` (steps inline, so the figure is the engine's and not thread hand-off noise).

>>> from benchmarks._measure import temp_dir
>>> with temp_dir() as d:
...     db = ScalingDb.create(d, "tiny", backlog=30, finished=10)
...     m = db.measure(claims=5, jobs=5)
>>> m.claim_us > 0, m.jobs_per_s > 0
(True, True)
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from engine import SqliteStore, Worker

from ._crashgate import workflow
from ._measure import peak_rss_mib

__all__ = ["ScalingDb", "Measurement", "worker_rss_mib"]

SUBMIT_CHUNK = 10_000
LEASE_S = 120.0

INSERT_FINISHED_JOB = (
    "INSERT INTO job (id, workflow, state, result, attempts, next_run_at, lease_token, created, updated) "
    "VALUES (?, 'reference', 'delivered', ?, 0, NULL, 1, ?, ?)"
)
INSERT_FINISHED_PAYLOAD = "INSERT INTO job_payload (job_id, payload) VALUES (?, ?)"
INSERT_FINISHED_MEMO = "INSERT INTO step_result (job_id, step, output, cost, at) VALUES (?, ?, ?, 0.0001, ?)"
INSERT_SENT_OUTBOX = (
    "INSERT INTO outbox (job_id, kind, payload, created, sent_at, attempts, next_attempt_at) "
    "VALUES (?, 'delivery', ?, ?, ?, 1, ?)"
)
STEP_NAMES = ("fetch", "extract", "verify", "deliver")


@dataclass(frozen=True)
class Measurement:
    claim_us: float  # median time of one claim transaction
    jobs_per_s: float  # run_once over the backlog, four steps per job


class ScalingDb:
    """One database held at a fixed backlog across repeated measurements."""

    def __init__(self, path: str, backlog: int) -> None:
        self.path = path
        self.backlog = backlog
        self.store = SqliteStore(path)
        self.worker = Worker(self.store, workflow(), worker_id="bench-scaling", threaded=False, lease_s=LEASE_S)
        self._next_id = 0

    @classmethod
    def create(cls, directory: str, name: str, *, backlog: int, finished: int) -> ScalingDb:
        db = cls(os.path.join(directory, f"scaling-{name}.db"), backlog)
        if finished:
            db._add_finished(finished)
        db._submit(backlog)
        return db

    def close(self) -> None:
        self.store.close()

    def measure(self, *, claims: int, jobs: int) -> Measurement:
        """Top the backlog up by what this measurement consumes, then time claims and jobs."""
        self._submit(claims + jobs)
        timings = []
        for _ in range(claims):
            started = time.perf_counter()
            claim = self.store.claim("bench-claimer", now=time.time(), lease_s=LEASE_S, starts=self.worker._starts)
            timings.append(time.perf_counter() - started)
            if claim is None:
                raise AssertionError(f"claim found nothing in a backlog of {self.backlog}")
        timings.sort()
        started = time.perf_counter()
        for _ in range(jobs):
            result = self.worker.run_once()
            if result.outcome != "done":
                raise AssertionError(f"scaling job {result.job_id!r} ended {result.outcome!r}")
        return Measurement(timings[len(timings) // 2] * 1e6, jobs / (time.perf_counter() - started))

    def _submit(self, count: int) -> None:
        now = time.time()
        for start in range(0, count, SUBMIT_CHUNK):
            n = min(SUBMIT_CHUNK, count - start)
            ids = [f"q-{self._next_id + i}" for i in range(n)]
            self._next_id += n
            self.store.submit_many([(job_id, {"source": job_id}) for job_id in ids], now=now)

    def _add_finished(self, count: int) -> None:
        at = time.time() - 3600.0
        ids = [f"done-{i}" for i in range(count)]
        with self.store._write() as conn:
            conn.executemany(INSERT_FINISHED_JOB, ((j, '{"key":"x"}', at, at) for j in ids))
            conn.executemany(INSERT_FINISHED_PAYLOAD, ((j, f'{{"source":"{j}"}}') for j in ids))
            conn.executemany(INSERT_FINISHED_MEMO, ((j, step, '{"ok":true}', at) for j in ids for step in STEP_NAMES))
            conn.executemany(INSERT_SENT_OUTBOX, ((j, '{"ok":true}', at, at, at) for j in ids))


def worker_rss_mib(path: str, jobs: int) -> float:
    """Peak RSS of a fresh worker process that runs ``jobs`` jobs (threaded, the default) from ``path``."""
    store = SqliteStore(path)
    worker = Worker(store, workflow(), worker_id="bench-rss")
    for _ in range(jobs):
        if worker.run_once().outcome == "idle":
            break
    store.close()
    return peak_rss_mib()
