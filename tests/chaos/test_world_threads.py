"""The world's services called from many threads at once, as an engine that runs each workflow
in a thread of its own calls them (DBOS Transact does): every paid call and every delivery is in
the ledger, once, and none fails for the harness's sake.

Method: 16 threads, started together on a barrier, each pays for a call and delivers an effect
on the same World, many rounds; then the ledger is read back. With one connection shared by
the threads, a receiver's ``BEGIN IMMEDIATE`` met another thread's open transaction
("cannot start a transaction within a transaction") or committed it half-way.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from chaos.core.world import World
from engine import FakeClock

THREADS = 16
ROUNDS = 30


def test_the_worlds_services_hold_under_threads_calling_at_once(tmp_path):
    world = World(str(tmp_path), FakeClock(0.0))
    start = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def workflow(n: int) -> None:
        ctx = SimpleNamespace(job_id=f"doc-{n}", step="extract", worker_id="w-1", token=None)
        start.wait()
        try:
            for round_ in range(ROUNDS):
                world.model.complete(ctx, "extract", "a prompt")
                world.sender.send(f"doc-{n}:{round_}", "delivery", {"n": n})
        except BaseException as exc:  # noqa: BLE001 - every failure is the finding
            errors.append(exc)

    threads = [threading.Thread(target=workflow, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    world.close()

    assert [f"{type(e).__name__}: {e}" for e in errors] == []
    reader = World(str(tmp_path), FakeClock(0.0))
    assert len(reader.calls()) == THREADS * ROUNDS
    applied = reader.conn.execute("SELECT count(*), count(DISTINCT key) FROM effect").fetchone()
    assert applied == (THREADS * ROUNDS, THREADS * ROUNDS)
    reader.close()


def test_a_probe_reads_on_a_connection_of_its_own_not_one_of_the_engines_pool(tmp_path):
    """Goal: in a worker's process of an engine on a pool (``connections = "pool"``), the probe's
    read at each paid call is not taken for one of the engine's connections (its statements
    traced as the engine's, a disk-full fault's page limit set on it). Method: hook
    ``sqlite3.connect`` on the database as a worker's process does, probe from two threads, and
    read the pool; an engine's own connection opened meanwhile joins it."""
    pytest.importorskip("litequeue")
    import sqlite3

    from chaos.adapter import create_database, probe_of
    from chaos.adapters.litequeue import adapter
    from chaos.core import pool

    db = str(tmp_path / "engine.db")
    create_database(adapter(), db)
    hooked = pool.intercept(db)
    try:
        probe = probe_of(adapter(), db)
        answers = []
        threads = [threading.Thread(target=lambda: answers.append(probe("doc-1", "fetch", "w-1", None, 0.0))) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        engines = sqlite3.connect(db)
        assert answers == [(False, False)] * 2
        assert hooked.connections() == [engines]
        engines.close()
        probe.close()
    finally:
        pool.release()
