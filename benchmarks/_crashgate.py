"""crashgate end to end: submit -> fetch, extract, verify, deliver -> outbox delivered.

The workflow is the reference one on its offline services (:class:`engine.LocalModel`,
:class:`engine.GeneratedDocuments`), so each step does a few microseconds of real work. A run
submits its jobs in batches, lets one worker (in this process) or several worker processes (each
with its own :class:`engine.SqliteStore`, opened after the process starts) run until nothing is
due, then drains the outbox into a receiver that dedupes on the idempotency key. The clock stops
when the last effect is delivered.

Commits are counted by a store subclass that only wraps ``_write`` (the engine's one write path)
with a counter: the engine itself carries no instrumentation.

>>> with temp_dir() as d:
...     run = end_to_end(d, jobs=5, synchronous="NORMAL", workers=1, threaded=False)
>>> run.jobs, round(run.commits / run.jobs)
(5, 6)
"""

from __future__ import annotations

import multiprocessing
import os
import time
from dataclasses import dataclass
from typing import Any

from engine import (
    GeneratedDocuments,
    LocalModel,
    SqliteStore,
    Worker,
    reference_workflow,
    send_outbox,
)

from ._measure import peak_rss_mib, temp_dir

__all__ = ["end_to_end", "EndToEnd", "CountingStore", "steps_us_per_job", "workflow", "BareContext", "STEPS", "SUBMIT_BATCH"]

STEPS = 4
SUBMIT_BATCH = 100  # jobs per submit transaction (the outbox sender marks in batches of 100 too)
SEND_PASSES_MAX = 100_000
WORKER_START_S_MAX = 60.0
WORKER_JOIN_S_MAX = 600.0
# A worker that meets StoreBusy mid-job leaves the job leased until its lease expires (the engine's
# "busy: try later"), which a run that drains its queue once would report as an undelivered job.
# On a machine shared with fsync-heavy test suites a commit can wait seconds for the write lock, so
# the benchmark's stores wait much longer than the engine's default 5 s before giving up.
BUSY_TIMEOUT_S = 120.0


class CountingStore(SqliteStore):
    """A SqliteStore that counts its write transactions (``BEGIN IMMEDIATE`` ... ``COMMIT``)."""

    commits = 0

    def _write(self) -> Any:
        self.commits += 1
        return super()._write()


class DedupingReceiver:
    """Where effects go: applies each idempotency key once, as a real receiver must."""

    def __init__(self) -> None:
        self.applied: set[str] = set()

    def send(self, key: str, kind: str, payload: Any) -> None:
        self.applied.add(key)


@dataclass(frozen=True)
class EndToEnd:
    jobs: int
    seconds: float
    commits: int  # every write transaction: submits, claims, step completions, outbox marks
    worker_rss_mib: float

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.seconds


def end_to_end(directory: str, *, jobs: int, synchronous: str, workers: int, threaded: bool) -> EndToEnd:
    """Run ``jobs`` reference jobs from submit to delivered effect; see the module docstring."""
    path = os.path.join(directory, f"e2e-{workers}w-{synchronous.lower()}-{time.monotonic_ns()}.db")
    store = CountingStore(path, synchronous=synchronous, busy_timeout_s=BUSY_TIMEOUT_S)
    try:
        ids = [f"doc-{i}" for i in range(jobs)]
        if workers == 1:
            worker = Worker(store, workflow(), worker_id="bench-1", threaded=threaded)
            started = time.perf_counter()
            _submit(store, ids)
            _work(worker, jobs)
            worker_commits, rss = 0, peak_rss_mib()
        else:
            started, worker_commits, rss = _work_in_processes(store, ids, path, synchronous, workers, threaded)
        receiver = DedupingReceiver()
        _drain_outbox(store, receiver)
        seconds = time.perf_counter() - started
        _check_all_delivered(store, receiver, ids)
        return EndToEnd(jobs, seconds, store.commits + worker_commits, rss)
    finally:
        store.close()


def steps_us_per_job(jobs: int) -> float:
    """What the four reference steps themselves cost per job, called directly with no engine."""
    steps = workflow().steps
    started = time.perf_counter()
    for i in range(jobs):
        ctx = BareContext(f"doc-{i}", {"source": f"doc-{i}"})
        for step in steps:
            ctx.inputs[step.name] = step.fn(ctx).output
    return (time.perf_counter() - started) / jobs * 1e6


class BareContext:
    """The parts of :class:`engine.StepContext` the reference steps read."""

    def __init__(self, job_id: str, payload: Any) -> None:
        self.job_id = job_id
        self.payload = payload
        self.inputs: dict[str, Any] = {}

    def heartbeat(self) -> None:
        return None


def workflow() -> Any:
    return reference_workflow(LocalModel(), GeneratedDocuments())


def _submit(store: SqliteStore, ids: list[str]) -> None:
    now = time.time()
    for start in range(0, len(ids), SUBMIT_BATCH):
        store.submit_many([(job_id, {"source": job_id}) for job_id in ids[start : start + SUBMIT_BATCH]], now=now)


def _work(worker: Worker, jobs: int) -> int:
    """Run until nothing is due; returns the jobs this worker finished."""
    done = 0
    for _ in range(4 * jobs + 100):  # each job needs one claim; busy results are retried
        result = worker.run_once()
        if result.outcome == "idle":
            return done
        if result.outcome == "done":
            done += 1
        elif result.outcome != "busy":
            raise AssertionError(f"job {result.job_id!r} ended {result.outcome!r} in a fault-free benchmark")
    raise AssertionError(f"worker still busy after {4 * jobs + 100} iterations")


def _drain_outbox(store: SqliteStore, receiver: DedupingReceiver) -> None:
    for _ in range(SEND_PASSES_MAX):
        if send_outbox(store, receiver).sent == 0:
            return
    raise AssertionError(f"outbox not drained after {SEND_PASSES_MAX} passes")


def _check_all_delivered(store: SqliteStore, receiver: DedupingReceiver, ids: list[str]) -> None:
    states = dict(store.conn.execute("SELECT state, COUNT(*) FROM job GROUP BY state").fetchall())
    if states != {"delivered": len(ids)}:
        raise AssertionError(f"after the run the jobs are in {states}, not all delivered")
    if len(receiver.applied) != len(ids):
        raise AssertionError(f"{len(receiver.applied)} effects applied for {len(ids)} jobs")


def _work_in_processes(
    store: CountingStore, ids: list[str], path: str, synchronous: str, workers: int, threaded: bool
) -> tuple[float, int, float]:
    """Start worker processes, submit, let them drain the queue; (start time, commits, peak RSS)."""
    ctx = multiprocessing.get_context("spawn")  # nothing of this process leaks into a worker
    ready = ctx.Barrier(workers + 1)
    go = ctx.Event()
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_worker_process, args=(path, synchronous, threaded, f"bench-{n}", len(ids), ready, go, results))
        for n in range(workers)
    ]
    for proc in procs:
        proc.start()
    try:
        ready.wait(WORKER_START_S_MAX)
        started = time.perf_counter()
        _submit(store, ids)
        go.set()
        reports = [results.get(timeout=WORKER_JOIN_S_MAX) for _ in procs]
    finally:
        for proc in procs:
            proc.join(WORKER_JOIN_S_MAX)
            if proc.is_alive():
                proc.kill()
    errors = [r["error"] for r in reports if "error" in r]
    if errors:
        raise AssertionError(f"a worker process failed: {errors[0]}")
    return started, sum(r["commits"] for r in reports), max(r["rss_mib"] for r in reports)


def _worker_process(
    path: str, synchronous: str, threaded: bool, worker_id: str, jobs: int, ready: Any, go: Any, results: Any
) -> None:
    try:
        store = CountingStore(path, synchronous=synchronous, busy_timeout_s=BUSY_TIMEOUT_S)
        worker = Worker(store, workflow(), worker_id=worker_id, threaded=threaded)
        ready.wait(WORKER_START_S_MAX)
        go.wait(WORKER_START_S_MAX)
        done = _work(worker, jobs)
        store.close()
        results.put({"done": done, "commits": store.commits, "rss_mib": peak_rss_mib()})
    except BaseException as exc:  # reported to the parent, which fails the run with it
        results.put({"error": f"{type(exc).__name__}: {exc}"})


if __name__ == "__main__":  # pragma: no cover - a manual probe: python -m benchmarks._crashgate
    with temp_dir() as d:
        print(end_to_end(d, jobs=500, synchronous="NORMAL", workers=1, threaded=True))
