"""Shared fixtures: a real SQLite file per test, a fake clock, a seeded RNG."""

from __future__ import annotations

import os
import random

import pytest

from engine import FakeClock, GeneratedDocuments, LocalModel, SqliteStore, Worker, reference_workflow

T0 = 1_700_000_000.0

# pytester runs the crashgate plugin end to end in throwaway projects (tests/plugin, tests/report).
pytest_plugins = ("pytester",)


WORKERS_PER_CPU = 3


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: three test processes per CPU this process may run on, not one.

    Most of this suite's time is spent waiting on the processes a test starts (a worker frozen or
    killed at its point, a lease or a lock left to expire, a library's own timeouts, a throwaway
    server). Measured on two cores: one test process per CPU kept them busy 111% of the time of
    200% (21 min 18 s), two 172% (14 min 9 s), three 185% (12 min 4 s; its one failure, a power
    test that needed a quiet moment, no longer does).
    xdist's own variable still decides where it is set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return WORKERS_PER_CPU * len(os.sched_getaffinity(0))


@pytest.hookimpl(trylast=True)  # after any plugin that shuffles: the slow modules still go first
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the modules that hold a test marked ``slow`` first, each module's tests kept together.

    xdist's worksteal hands each worker a part of the queue and lets an idle worker take half of a
    busy one's remaining tests. A slow test left at the end of a queue is the run's tail: both
    workers wait on one. Queued first, the long tests run while the short ones fill the gaps behind
    them, so the run ends within about one short test of the other worker. Each module stays in
    one piece so that its module fixtures (a built wheel, a shared matrix run) are set up once.
    The order is the same in every worker, as xdist requires (a stable sort of the collection).
    """
    slow_modules = {item.module for item in items if item.get_closest_marker("slow") is not None and hasattr(item, "module")}
    items.sort(key=lambda item: getattr(item, "module", None) not in slow_modules)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def db_path(tmp_path) -> str:
    return str(tmp_path / "engine.db")


@pytest.fixture
def store(db_path):
    s = SqliteStore(db_path)
    yield s
    s.close()


@pytest.fixture
def workflow():
    return reference_workflow(LocalModel(), GeneratedDocuments())


@pytest.fixture
def make_worker(store, workflow, clock):
    def make(worker_id: str = "w1", *, wf=None, st=None, **options):
        options.setdefault("threaded", False)
        options.setdefault("rng", random.Random(7))
        return Worker(st or store, wf or workflow, worker_id=worker_id, clock=clock, **options)

    return make


@pytest.fixture
def history():
    """Fresh random histories (``history(adapter=None, jobs=1)``: the reference engine's by
    default, the jobs of the pool submitted), checked after each step by the test; cleaned up
    after it."""
    from chaos import ReferenceAdapter
    from chaos.histories.state_machine import machine_for

    machines = []

    def make(adapter=None, jobs=1):
        machine = machine_for(adapter or ReferenceAdapter())()
        machines.append(machine)
        machine.start(jobs)
        machine.every_invariant_holds_now()
        return machine

    yield make
    for machine in machines:
        machine.ok = False  # only clean up: a test that wants the at-rest checks calls teardown itself
        machine.teardown()


# The throwaway PostgreSQL server (a session fixture) and a fresh database per test (pg_url).
from pg_fixtures import pg_server, pg_url  # noqa: E402,F401  (tests/ is on sys.path via this conftest)


@pytest.fixture
def power() -> None:
    """Power cuts need root, loop devices and e2fsprogs: without them a power test skips with one
    line saying what is missing; with ``CI=true`` that is a failure instead, so CI cannot pass
    without cutting the power of a real file system."""
    from pg_fixtures import require

    from chaos.hostfaults.power import power_missing

    require(power_missing())
