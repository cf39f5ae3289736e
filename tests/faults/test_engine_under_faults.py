"""The engine against a misbehaving machine, one fault at a time, with the real mechanism.

Each test makes the machine fail in one way (a full disk, a held write lock, a clock that jumps,
a dropped server connection, EIO or ENOSPC from write and fsync in a real worker process) and
checks what the issue asks for: the worker survives with a clear outcome, nothing committed is
lost, the database passes ``PRAGMA integrity_check``, and the same worker finishes the work once
the fault is gone.
"""

from __future__ import annotations

import errno
import json
import os
import random
import sqlite3
import subprocess
import sys
import time

import pytest

from engine import FakeClock, SqliteStore, StoreFailed, Worker

ROUNDS_MAX = 20


def _small_pages(path: str) -> SqliteStore:
    """A database with 512-byte pages, so that a few rows need a new page (see PAGE_BYTES)."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA page_size = 512")
    conn.execute("VACUUM")
    conn.close()
    return SqliteStore(path)


def _drain(worker: Worker, clock: FakeClock) -> None:
    for _ in range(ROUNDS_MAX):
        while worker.run_once().outcome not in ("idle", "busy", "unavailable"):
            pass
        if all(job.state == "delivered" for job in worker.store.jobs()):
            return
        clock.advance(worker.lease_s + 1)


def _integrity(path: str) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [r[0] for r in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()


def test_a_full_disk_fails_the_transaction_not_the_worker_and_the_same_worker_finishes_later(tmp_path, clock, workflow):
    path = str(tmp_path / "engine.db")
    store = _small_pages(path)
    store.submit_many([(f"doc-{n}", {"source": f"doc-{n}"}) for n in range(1, 4)], now=clock.now())
    worker = Worker(store, workflow, worker_id="w1", clock=clock, rng=random.Random(1), threaded=False)
    limit = store.conn.execute("PRAGMA max_page_count").fetchone()[0]
    pages = store.conn.execute("PRAGMA page_count").fetchone()[0]
    store.conn.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full at the current size

    outcomes = [worker.run_once().outcome for _ in range(3)]
    assert "unavailable" in outcomes
    assert _integrity(path) == ["ok"]
    assert {job.id for job in store.jobs()} == {"doc-1", "doc-2", "doc-3"}

    store.conn.execute(f"PRAGMA max_page_count = {limit}")  # space again
    _drain(worker, clock)
    assert [job.state for job in store.jobs()] == ["delivered"] * 3
    assert _integrity(path) == ["ok"]


class _RecordingClock(FakeClock):
    def __init__(self) -> None:
        super().__init__()
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        super().sleep(seconds)


class _FailingDisk:
    """A store whose every claim meets a disk that fails (a fake: the policy is what is tested)."""

    def claim(self, *args, **kwargs):
        raise StoreFailed("database 'x': BEGIN IMMEDIATE failed with SQLITE_IOERR_WRITE (disk I/O error)")


def test_the_worker_loop_backs_off_exponentially_while_the_database_fails(workflow):
    clock = _RecordingClock()
    worker = Worker(_FailingDisk(), workflow, clock=clock, rng=random.Random(3), threaded=False)
    assert worker.run(idle_sleep_s=0.2, iterations_max=10) == 0
    assert len(clock.sleeps) == 10
    for n, slept in enumerate(clock.sleeps, start=1):
        ceiling = min(30.0, 0.2 * 2**n)
        assert 0.5 * ceiling <= slept <= 1.5 * ceiling


def test_a_write_lock_held_past_the_busy_timeout_is_busy_and_the_same_worker_resumes(tmp_path, clock, workflow):
    path = str(tmp_path / "engine.db")
    store = SqliteStore(path, busy_timeout_s=0.05)
    store.submit("doc-1", {"source": "doc-1"}, now=clock.now())
    worker = Worker(store, workflow, worker_id="w1", clock=clock, threaded=False)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process: a backup, a migration, a frozen peer
    try:
        assert [worker.run_once().outcome for _ in range(3)] == ["busy"] * 3
        assert store.get("doc-1").state == "pending"
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert worker.run_once().outcome == "done"


def test_a_lease_is_not_taken_while_valid_by_the_claimers_clock_after_that_clock_stepped_back(store, clock, workflow):
    store.submit("doc-1", {"source": "doc-1"}, now=clock.now())
    frozen = store.claim("w-frozen", now=clock.now(), lease_s=120, starts={"pending": "fetching"})
    other = Worker(store, workflow, worker_id="w-other", clock=clock, threaded=False)
    clock.advance(-3600)  # an NTP step: every lease now looks an hour longer
    assert other.run_once().outcome == "idle"
    clock.advance(3600 + 121)  # the lease runs out by the claimer's clock
    assert other.run_once().outcome == "done"
    assert store.get("doc-1").lease_token == frozen.token + 1


def test_a_backoff_scheduled_before_a_step_back_waits_the_step_longer_and_no_more(store, clock, workflow):
    from engine import ConnectionFailed, Step, Workflow

    calls = []

    def flaky(ctx):
        calls.append(ctx.now())
        if len(calls) == 1:
            raise ConnectionFailed("reset")
        return {"ok": True}

    worker = Worker(store, Workflow("one", [Step("work", flaky)]), clock=clock, rng=random.Random(2), threaded=False)
    store.submit("j", {}, now=clock.now())
    assert worker.run_once().outcome == "retry"
    due = store.get("j").next_run_at
    clock.advance(-3600)
    assert worker.run_once().outcome == "idle"
    clock.set(due)
    assert worker.run_once().outcome == "done"


def test_a_postgres_worker_whose_connection_the_server_dropped_backs_off_and_reconnects(pg_url, clock, workflow):
    import psycopg

    from engine import PostgresStore

    store = PostgresStore(pg_url)
    try:
        store.submit("doc-1", {"source": "doc-1"}, now=clock.now())
        worker = Worker(store, workflow, worker_id="w1", clock=clock, threaded=False)
        with psycopg.connect(pg_url, autocommit=True) as admin:  # a restart or a failover, as the worker sees it
            admin.execute("SELECT pg_terminate_backend(%s)", (store.conn.info.backend_pid,))
        assert worker.run_once().outcome == "unavailable"
        assert worker.run_once().outcome == "done"
    finally:
        store.close()


# -- EIO and ENOSPC in a real worker process, through libfiu's POSIX preload ----------------------
WORKER_PROCESS = r"""
import json, os, sys, time
from collections import Counter
from engine import FakeClock, SqliteStore, Worker, default_workflow

db, synchronous, done_marker = sys.argv[1], sys.argv[2], sys.argv[3]
seen = Counter()


class Paced(FakeClock):
    # Fake time moves as the loop asks; real time a little, so that the test can act meanwhile.
    def sleep(self, seconds):
        self.advance(max(0.0, seconds))
        time.sleep(0.002)


class Counting(Worker):
    def run_once(self):
        result = super().run_once()
        seen[result.outcome] += 1
        time.sleep(0.005)  # a job every few milliseconds, so that the faults meet work in progress
        return result


class AllDelivered:
    def is_set(self):  # reads: they work while writes fail
        if not os.path.exists(done_marker):  # the test submits more work while the disk fails
            return False
        return store.conn.execute("SELECT COUNT(*) FROM job WHERE state != 'delivered'").fetchone()[0] == 0


store = SqliteStore(db, synchronous=synchronous)
worker = Counting(store, default_workflow(), worker_id="w-fiu", clock=Paced(1_700_000_000.0), threaded=False)
worker.run(idle_sleep_s=1.0, stop=AllDelivered(), iterations_max=100_000)
print(json.dumps(seen))  # once the disk answers again
"""
JOBS = 20  # before the fault, and as many again while it lasts
FAILURES = {
    # (synchronous, failure points with the errno they return)
    "eio": ("NORMAL", (("posix/io/rw/pwrite", "EIO"), ("posix/io/rw/write", "EIO"))),
    "enospc": ("NORMAL", (("posix/io/rw/pwrite", "ENOSPC"), ("posix/io/rw/write", "ENOSPC"))),
    "fsync-eio": ("FULL", (("posix/io/sync/fdatasync", "EIO"), ("posix/io/sync/fsync", "EIO"))),
}


def _delivered(path: str) -> int:
    conn = sqlite3.connect(path, timeout=30)
    try:
        return conn.execute("SELECT COUNT(*) FROM job WHERE state = 'delivered'").fetchone()[0]
    finally:
        conn.close()


def _wait(condition, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _fiu_ctrl(prefix: str, pid: int, commands: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "FIU_CTRL_FIFO")}
    args = [arg for command in commands for arg in ("-c", command)]
    subprocess.run(["fiu-ctrl", "-f", prefix, *args, str(pid)], env=env, check=True, timeout=30)


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_worker_process_survives_io_errors_switched_on_and_off_from_outside(libfiu, tmp_path, failure):
    synchronous, points = FAILURES[failure]
    path = str(tmp_path / "engine.db")
    store = SqliteStore(path)
    store.submit_many([(f"doc-{n}", {"source": f"doc-{n}"}) for n in range(1, JOBS + 1)], now=0.0)
    script = tmp_path / "worker.py"
    script.write_text(WORKER_PROCESS)
    prefix = str(tmp_path / "fiu-ctrl")
    marker = tmp_path / "done"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    worker = subprocess.Popen(
        ["fiu-run", "-x", "-f", prefix, sys.executable, str(script), path, synchronous, str(marker)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        _wait(lambda: _delivered(path) >= 5)
        _fiu_ctrl(prefix, worker.pid, [f"enable name={name},failinfo={getattr(errno, code)}" for name, code in points])
        frozen = _delivered(path)
        # More work arrives (this process's disk is fine) while the worker's writes fail.
        store.submit_many([(f"doc-{n}", {"source": f"doc-{n}"}) for n in range(JOBS + 1, 2 * JOBS + 1)], now=0.0)
        time.sleep(0.5)  # the worker runs on against a failing disk
        assert worker.poll() is None, worker.stderr.read()
        assert _delivered(path) == frozen  # nothing commits while every write (or fsync) fails
        _fiu_ctrl(prefix, worker.pid, [f"disable name={name}" for name, _ in points])
        marker.touch()
        out, err = worker.communicate(timeout=120)
    finally:
        store.close()
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, err
    seen = json.loads(out)
    assert seen.get("unavailable", 0) >= 1, seen
    assert _delivered(path) == 2 * JOBS
    assert _integrity(path) == ["ok"]
