"""The faults of the machine on PostgreSQL: a held lock, clock jumps and damaged rows run there with
real mechanisms, the disk and io faults are refused with the reason and the fix, and a planted bug
that only a held lock reveals is caught while the reference engine holds.

Method: the machine family (``backlog``) on the session's throwaway server, every point where a
fault can show; each scenario gets a database of its own, dropped afterwards.
"""

from __future__ import annotations

import io
import json
import shlex
from contextlib import redirect_stderr, redirect_stdout

import psycopg
import pytest

from chaos import run_matrix
from chaos.cli import main
from chaos.hostfaults.checks import integrity
from chaos.hostfaults.faults import MACHINE_FAULTS, run_machine_fault
from chaos.adapters.postgres import PostgresReferenceAdapter
from chaos.adapters.reference import REFERENCE_SCHEMA
from engine import PostgresStore, Step, StepOutput, Worker, Workflow

from .variants import MACHINE_PLANTED

RUNS_ON_POSTGRES = ("lock", "clock", "damage")


def _databases(server) -> set[str]:
    with psycopg.connect(server.url(), autocommit=True) as conn:
        return {r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'fam%' OR datname LIKE 'scen%'")}


def _violations(report):
    return [f"{r.id} [{r.fault}] {v}" for r in report.results for v in r.outcome.violations][:5]


def _found(report):
    return {v.invariant for r in report.results for v in r.outcome.violations}


def test_the_engine_holds_on_postgresql_under_a_held_lock_clock_jumps_and_damaged_rows(pg_server):
    report = run_matrix(PostgresReferenceAdapter(pg_server.url()), families=["backlog"], faults=list(RUNS_ON_POSTGRES), jobs=2)
    assert report.violations == 0, _violations(report)
    kinds = {sub for kind in RUNS_ON_POSTGRES for sub in MACHINE_FAULTS[kind]}
    assert set(report.by_fault()) == kinds
    faulted = {r.fault for r in report.results if r.outcome.exit == "faulted"}
    assert faulted == kinds, f"a fault never showed: {sorted(kinds - faulted)}"
    # The lock showed as the engine's clean back-off ("busy"), never as a crash: every lock
    # scenario is "faulted", which needs at least one busy or unavailable answer from the worker.
    assert {r.outcome.exit for r in report.results if r.fault == "lock-held"} == {"faulted"}
    assert _databases(pg_server) == set()


def test_a_postgres_worker_whose_writes_outwait_their_lock_timeout_is_busy_then_resumes(pg_url, clock, workflow):
    """The engine's side of lock-held, without the harness: lock_timeout (busy_timeout_s) bounds
    every wait; the claim answers busy, writes nothing, and the same worker finishes once the lock
    is gone."""
    store = PostgresStore(pg_url, busy_timeout_s=0.05)
    store.submit_many([("doc-1", {"source": "doc-1"}), ("doc-2", {"source": "doc-2"})], now=clock.now())
    worker = Worker(store, workflow, worker_id="w1", clock=clock, threaded=False)
    try:
        with psycopg.connect(pg_url, autocommit=True) as holder:
            with holder.transaction():  # a migration, a backup tool: every write waits
                holder.execute("LOCK TABLE job, step_result, outbox IN EXCLUSIVE MODE")
                assert [worker.run_once().outcome for _ in range(3)] == ["busy"] * 3
        assert [(job.state, job.lease_owner) for job in store.jobs()] == [("pending", None)] * 2
        while worker.run_once().outcome not in ("idle", "busy", "unavailable"):
            pass
        assert [job.state for job in store.jobs()] == ["delivered", "delivered"]
    finally:
        store.close()


def test_a_postgres_commit_that_meets_a_row_lock_is_busy_keeps_the_lease_and_the_step_reruns(pg_url, clock):
    """A session holds the claimed job's row (SELECT ... FOR UPDATE) while its step runs: the
    commit gives up after lock_timeout, writes nothing, and the job is finished after its lease."""
    holder = psycopg.connect(pg_url, autocommit=True)
    calls = []

    def step(ctx):
        calls.append(ctx.job_id)
        if len(calls) == 1:  # a report, a manual fix: someone takes the job's row mid-step
            holder.execute("BEGIN")
            holder.execute("SELECT id FROM job WHERE id = %s FOR UPDATE", (ctx.job_id,))
        return StepOutput({"ok": True})

    wf = Workflow("one", [Step("only", step)])
    store = PostgresStore(pg_url, busy_timeout_s=0.05, workflow="one")
    store.submit("doc-1", {"source": "doc-1"}, now=clock.now())
    worker = Worker(store, wf, worker_id="w1", clock=clock, threaded=False)
    try:
        result = worker.run_once()
        assert (result.outcome, result.job_id) == ("busy", "doc-1")
        holder.execute("ROLLBACK")
        job = store.get("doc-1")
        assert (job.lease_owner, store.memo("doc-1", "only")) == ("w1", None)
        assert worker.run_once().outcome == "idle"  # its lease still runs
        clock.advance(worker.lease_s + 1)
        assert worker.run_once().outcome == "done" and len(calls) == 2
    finally:
        store.close()
        holder.close()


@pytest.mark.parametrize("faults, kind, subs", [("disk", "disk", "disk-full"), ("io-enospc", "io", "io-enospc")])
def test_disk_and_io_faults_are_refused_on_postgresql_with_the_reason_and_the_fix(pg_server, monkeypatch, tmp_path, faults, kind, subs):
    monkeypatch.setenv("PATH", str(tmp_path))  # no fiu-run there: refused for PostgreSQL first, libfiu or not
    for call in (lambda: run_matrix("chaos:postgres_adapter", db=pg_server.url(), families=["backlog"], faults=[faults, "lock"]),
                 lambda: run_matrix(PostgresReferenceAdapter(pg_server.url()), families=["backlog"], faults=[faults])):
        with pytest.raises(ValueError) as refused:
            call()
        message = str(refused.value)
        assert f"the {kind} fault kind ({subs}) cannot run on PostgreSQL" in message
        assert "the server, not the worker, writes the database files" in message or "the worker writes no database file" in message
        assert f"run {kind} on SQLite (python -m chaos matrix --faults {kind}, without --db" in message
        assert "lock, clock and damage run on PostgreSQL" in message
    assert _databases(pg_server) == set()


def test_the_command_refuses_disk_on_postgresql_and_runs_lock_there(pg_server):
    err = io.StringIO()
    with redirect_stderr(err):
        assert main(["matrix", "--db", pg_server.url(), "--faults", "disk,lock"]) == 2
    assert "the disk fault kind (disk-full) cannot run on PostgreSQL" in err.getvalue()

    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["matrix", "--db", pg_server.url(), "--family", "backlog", "--faults", "lock", "--sample", "3", "--json"])
    report = json.loads(out.getvalue())
    assert code == 0, report["violations"]
    assert set(report["by_fault"]) == {"lock-held"} and report["points"] == 3
    assert all("--faults lock-held" in r["replay"] and r["replay"].endswith("--db " + shlex.quote(pg_server.url())) for r in report["results"])  # the URL names its password file: quoted
    assert _databases(pg_server) == set()


def test_a_machine_fault_called_directly_refuses_disk_on_postgresql(pg_server):
    with pytest.raises(ValueError, match=r"disk fault kind \(disk-full\) cannot run on PostgreSQL"):
        run_machine_fault(PostgresReferenceAdapter(pg_server.url()), None, None, "/nonexistent", seed=0, fault="disk-full")


def test_the_consistency_query_that_replaces_integrity_check_finds_a_row_left_without_its_job(pg_url):
    # Its queries come from the adapter's schema (the reference's tables here).
    PostgresStore(pg_url).close()
    assert integrity(pg_url, REFERENCE_SCHEMA) == []
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO step_result (job_id, step, output, cost, at) VALUES ('ghost', 'fetch', '{}', 0, 0)")
    [violation] = integrity(pg_url, REFERENCE_SCHEMA)
    assert violation.invariant == "integrity" and "1 memo rows without their job" in violation.detail


@pytest.mark.parametrize("variant", MACHINE_PLANTED, ids=lambda v: v.__name__)
def test_a_lock_bug_on_postgresql_passes_crashes_and_is_caught_by_the_held_lock(pg_server, variant):
    adapter = variant(pg_server.url())
    crash_only = run_matrix(adapter, families=["clean"], faults=["crash"], sample=8, jobs=2)
    assert crash_only.violations == 0, _violations(crash_only)
    report = run_matrix(adapter, families=list(variant.families), faults=list(variant.faults), jobs=2)
    for check in variant.catches:
        assert check in _found(report), f"{variant.__name__}: expected {check}, saw {sorted(_found(report))}"
    assert _databases(pg_server) == set()
