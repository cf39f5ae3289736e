"""The shipped DBOS Transact adapter (chaos.adapters.dbos): the crash matrix, run on DBOS's own
tables through the rows declaration and on DBOS's own connection pool, shows DBOS's known weakness
with its default executor id (a second launch recovers a live workflow and pays for its current
step again) and no false finding; and the weakness is reproduced without the harness, with two
real processes, a real SIGSTOP and a real SIGKILL, as are DBOS's other findings (a step out of
retries ends its workflow in ERROR for good; a launch that meets a held write lock fails; a step's
result that meets one waits for as long as it is held) with subprocesses and a lock held by sqlite3."""

from __future__ import annotations

import inspect
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("dbos")

from chaos.adapters import dbos_workflow  # noqa: E402
from chaos.matrix.families import reference_scenarios  # noqa: E402
from chaos.matrix.runner import run_matrix  # noqa: E402
from matrix_findings import violations  # noqa: E402

DBOS_TARGET = "chaos.adapters.dbos:adapter"


def _points_at(source: str) -> list[str]:
    """The clean family's points at the workflow module's line ``source``: its hits in extract and verify (the paid steps)."""
    lines = inspect.getsource(dbos_workflow).splitlines()
    line = next(n for n, text in enumerate(lines, 1) if text.strip() == source)
    return [f"clean::dbos_workflow._run:L{line}#{hit}" for hit in (2, 3)]


def test_dbos_pays_again_for_the_step_of_a_live_workflow_a_second_launch_recovers(tmp_path):
    """Goal: DBOS's known weakness shows. Method: freeze the worker in each paid step, just before
    its call, while another worker launches DBOS with the same (default) executor id, which
    recovers the frozen worker's workflow and runs it; then wake the frozen one. A freeze that
    catches one of DBOS's own threads inside a write leaves the other worker locked out instead
    (another finding): of four freezes, one at least leaves the lock free. The step paid for again
    shows as two paid calls (bounded-spend, where the freeze was shorter than a lease) or as the
    woken worker's call after the other's memo (no-spend-after-memo)."""
    found = []
    for point in _points_at('call = Call(job_id, step, world["worker_id"])'):
        found += violations(run_matrix(DBOS_TARGET, point=point, faults=["pause"], workdir=str(tmp_path / point.split("#")[1])))
    assert any((inv == "bounded-spend" and "2 paid calls" in msg) or (inv == "no-spend-after-memo" and "'w-doomed' paid" in msg)
               for inv, msg in found), found


def test_dbos_second_worker_runs_in_a_process_of_its_own_not_on_the_stalled_workers_dbos(tmp_path):
    """Goal: a family whose stalled call lets a second worker run meanwhile finishes on DBOS, whose
    adapter declares one engine per process. Method: run the stalled-call family (its baseline and
    crash points); run inside the stalled worker's call, the second worker would use that
    process's DBOS and wait there for the very workflow it runs inside, until the watchdog; in a
    fresh process it recovers the workflow, pays for the stalled step once more and finishes it."""
    report = run_matrix(DBOS_TARGET, families=["stalled-call"], faults=["crash"], sample=2, workdir=str(tmp_path), scenario_timeout_s=60)
    assert [v.detail for v in report.baselines["stalled-call"].violations] == []
    assert report.baselines["stalled-call"].calls["doc-1:extract"] == 2  # the stalled worker's call, and the second worker's
    assert report.points == 2
    assert [(inv, msg) for inv, msg in violations(report) if inv == "hangs"] == []


# -- the finding, reproduced without the harness: real processes, a real SIGSTOP and SIGKILL ------------

WORKER = textwrap.dedent("""
    import os, sys, time
    from dbos import DBOS, SetWorkflowID
    db, ledger, role = sys.argv[1], sys.argv[2], sys.argv[3]
    DBOS(config={"name": "repro", "system_database_url": f"sqlite:///{db}", "log_level": "ERROR"})  # default executor id

    @DBOS.step()
    def extract(doc):
        with open(ledger, "a") as f:  # the paid call, recorded outside DBOS
            f.write(f"{role} {os.getpid()}\\n")
        if role == "first":
            time.sleep(120)  # a long call: frozen here
        return {"fields": doc}

    @DBOS.workflow()
    def pipeline(doc):
        return extract(doc)

    DBOS.launch()  # the second process's launch recovers every pending workflow of executor 'local'
    if role == "first":
        with SetWorkflowID("doc-1"):
            pipeline("doc-1")
    else:
        DBOS.retrieve_workflow("doc-1").get_result()
        print(DBOS.retrieve_workflow("doc-1").get_status().status, flush=True)
""")


def _paid(ledger: str) -> list[str]:
    return open(ledger).read().splitlines() if os.path.exists(ledger) else []


def _wait_for(condition, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_dbos_plain_a_second_launch_pays_for_a_frozen_workers_step_again(tmp_path):
    """The bounded-spend finding, without the harness: a process runs a workflow whose step is
    paid for, then is frozen (SIGSTOP) in the step; a second process launches DBOS with the same
    default executor id, recovers the live workflow and pays for the step again; the first is then
    SIGKILLed. DBOS documents this: each process needs its own executor id."""
    db, ledger = str(tmp_path / "dbos.sqlite"), str(tmp_path / "paid.txt")
    first = subprocess.Popen([sys.executable, "-c", WORKER, db, ledger, "first"])
    try:
        _wait_for(lambda: len(_paid(ledger)) == 1, "the first worker's paid call")
        os.kill(first.pid, signal.SIGSTOP)
        status = sqlite3.connect(db).execute("SELECT status, executor_id FROM workflow_status WHERE workflow_uuid = 'doc-1'").fetchone()
        assert status == ("PENDING", "local")
        second = subprocess.run([sys.executable, "-c", WORKER, db, ledger, "second"], capture_output=True, text=True, timeout=120)
        assert second.stdout.strip() == "SUCCESS", second.stderr[-2000:]
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
    paid = [line.split()[0] for line in _paid(ledger)]
    assert paid == ["first", "second"]  # one step, paid for twice while the first worker was alive


def test_dbos_under_crashes_has_no_false_finding_and_nothing_to_damage(tmp_path):
    """Goal: no false finding from DBOS's rows read through the declaration (several tables per
    job, a step-sent effect read as the outbox DBOS's step log is, a recovery at launch read as a
    takeover, a step that refused its input or ran out of attempts read as no memo and no effect
    due). Method: crash the worker at a seeded sample of points of the clean family and of two whose
    workflow fails (verify refuses; extract fails on every attempt), and run the damage families,
    which are skipped since the adapter declares nothing DBOS reads to damage."""
    report = run_matrix(DBOS_TARGET, families=["clean", "verify-fail", "extract-outage", "damaged-payload", "damaged-memo"], faults=["crash"],
                        sample=6, workdir=str(tmp_path))
    assert sorted(report.skipped) == ["damaged-memo", "damaged-payload"], report.skipped
    assert report.points >= 1
    assert violations(report) == []


# -- DBOS's whole matrix: it finishes, and each finding is one DBOS explains -------------------------

# Why each family's baseline fails on DBOS, by invariant: DBOS's own behaviour, each explained in
# docs/how-to/write-an-adapter.md.
BASELINE_FINDINGS = {
    # DBOS retries "database is locked" without limit (its db_retry has no overall deadline), so a
    # worker that meets a write lock held elsewhere never gives up: the lock is held for as long.
    ("store-busy", "hangs"), ("heartbeat-busy", "hangs"),
    # A step whose result cannot be written (a full disk, an I/O error) ends its workflow's thread
    # with the error; the workflow's status cannot be written either and stays PENDING, and
    # get_result waits without end for a workflow nothing in the process runs again.
    ("disk-full", "hangs"), ("commit-io-error", "hangs"),
    # DBOS's launch (its migrations' BEGIN IMMEDIATE) is not retried: a held lock fails it after
    # DBOS's 30 s busy timeout, an I/O error at once.
    ("claim-busy", "raised"), ("claim-io-error", "raised"),
    # The family's outage fails each job three times in a row: as many as the workflow's step
    # retries (DBOS's default, max_attempts=3), so every workflow ends in ERROR.
    ("retry-storm", "baseline"),
    # The second worker's launch, with the default executor id, recovers the slow worker's live
    # workflow and pays for its step again.
    ("lost-lease", "bounded-spend"), ("slow-timeout", "bounded-spend"), ("stalled-call", "bounded-spend"), ("clock-skew", "bounded-spend"),
    ("lost-lease", "no-spend-after-memo"), ("slow-timeout", "no-spend-after-memo"), ("stalled-call", "no-spend-after-memo"),
    ("clock-skew", "no-spend-after-memo"),
}

# Findings at points, by invariant: a second launch with the default executor id recovers a
# frozen or slow worker's live workflow and pays for its step again (bounded-spend, and the woken
# worker's call after the memo: no-spend-after-memo); a frozen DBOS process whose own thread was
# inside a write holds SQLite's lock, and the other worker's launch gives up after DBOS's busy
# timeout (drains: raised while a peer was frozen) or its workflow's writes retry it without
# limit (hangs, stuck in DBOS's retry); whether the woken worker's workflow goes on after the
# takeover depends on which launch recorded the step first (point-reached: a later point not
# reached again).
POINT_FINDINGS = {"bounded-spend", "no-spend-after-memo", "drains", "hangs", "point-reached", "fenced-writes"}
STUCK_IN_DBOS = ("dbos/_sys_db.py", "dbos/_sys_db_sqlite.py", "dbos/_core.py")


# DBOS keeps SQLite in its rollback journal (not WAL): a process frozen inside a commit holds a lock
# that keeps readers out too, the harness's own reads of the database included. At a pause point
# whose freeze caught a DBOS thread so, every other finding of the point follows from that lock.
LOCKED = "database is locked"


def _locked_by_a_frozen_peer(result) -> bool:
    return result.fault.startswith("pause") and any(LOCKED in v.detail for v in result.outcome.violations)


def _unexplained(report) -> list[str]:
    out = [f"baseline of {name}: {v.invariant}: {v.detail}" for name, outcome in report.baselines.items()
           for v in outcome.violations if (name, v.invariant) not in BASELINE_FINDINGS]
    for result in report.results:
        if _locked_by_a_frozen_peer(result):
            continue
        for v in result.outcome.violations:
            if v.invariant not in POINT_FINDINGS:
                out.append(f"{result.id}: {v.invariant}: {v.detail}")
            elif v.invariant == "drains" and "while a peer was frozen" not in v.detail:
                out.append(f"{result.id}: {v.invariant}: {v.detail}")
            elif v.invariant == "hangs" and not any(path in stack.get("frames", "") for stack in result.outcome.stacks for path in STUCK_IN_DBOS):
                out.append(f"{result.id}: {v.invariant} outside DBOS: {v.detail}")
    return out


@pytest.mark.slow
def test_dbos_whole_matrix_sampled_finishes_with_only_findings_dbos_explains(tmp_path):
    """Goal: DBOS's whole matrix (every family, crashes and pauses) finishes, each scenario within
    its bound, and finds only what DBOS itself does. Method: a seeded sample of points over every
    family on two processes, the adapter's bound per scenario (twice DBOS's busy timeout); each
    finding must be one of those explained above."""
    started = time.monotonic()
    report = run_matrix(DBOS_TARGET, faults=["crash", "pause"], sample=WHOLE_SAMPLE, jobs=2, workdir=str(tmp_path))
    elapsed_s = time.monotonic() - started
    assert len(report.baselines) == len(reference_scenarios()), sorted(report.baselines)
    assert report.points == WHOLE_SAMPLE
    assert elapsed_s < WHOLE_BOUND_S, f"the sampled matrix took {elapsed_s:.0f} s"
    unexplained = _unexplained(report)
    assert unexplained == [], "\n".join(unexplained)


WHOLE_SAMPLE = 159  # three points a family on average, as the adapter how-to's command
WHOLE_BOUND_S = 1800.0  # about 6 minutes on two idle cores; every scenario is bounded by the watchdog


# -- the other findings on DBOS, reproduced without the harness: subprocesses, sqlite3 and a held lock ------

# The adapter's workflow's step retries (chaos.adapters.dbos_workflow.RETRY), spelled out here so that the
# reproduction needs nothing from crashgate.
FAILING_WORKER = textwrap.dedent("""
    import sys, time
    from dbos import DBOS, SetWorkflowID
    db, ledger, role = sys.argv[1], sys.argv[2], sys.argv[3]
    DBOS(config={"name": "repro", "system_database_url": f"sqlite:///{db}", "log_level": "ERROR"})

    @DBOS.step(retries_allowed=True, max_attempts=3, interval_seconds=0.05, backoff_rate=1.0)
    def extract(doc):
        with open(ledger, "a") as f:  # each call, recorded outside DBOS
            f.write("call\\n")
        with open(ledger) as f:
            calls = len(f.read().splitlines())
        if calls <= 3:  # an outage of three calls in a row: the fourth would succeed
            raise ConnectionError(f"outage (call {calls})")
        return {"fields": doc}

    @DBOS.workflow()
    def pipeline(doc):
        return extract(doc)

    DBOS.launch()  # the second process's launch recovers every pending workflow of executor 'local'
    if role == "first":
        try:
            with SetWorkflowID("doc-1"):
                pipeline("doc-1")
        except Exception as e:
            print(type(e).__name__, flush=True)
    else:
        time.sleep(3)  # time for the launch's recovery to run, were there anything to recover
        print(DBOS.retrieve_workflow("doc-1").get_status().status, flush=True)
""")


def _status(conn: sqlite3.Connection, workflow_id: str = "doc-1") -> str | None:
    row = conn.execute("SELECT status FROM workflow_status WHERE workflow_uuid = ?", (workflow_id,)).fetchone()
    return row[0] if row else None


def test_dbos_plain_a_step_that_fails_three_times_in_a_row_ends_its_workflow_in_error(tmp_path):
    """Goal: the retry-storm finding, without the harness: an outage as long as a step's retries
    ends its workflow in ERROR for good, though the next call would have succeeded. Method: a
    process runs a workflow whose step (the adapter's retries: three attempts) raises
    ConnectionError on its first three calls and would succeed on the fourth; DBOS raises, the
    workflow's row says ERROR after three calls; a second launch recovers nothing and calls the
    step no more."""
    db, ledger = str(tmp_path / "dbos.sqlite"), str(tmp_path / "calls.txt")
    first = subprocess.run([sys.executable, "-c", FAILING_WORKER, db, ledger, "first"], capture_output=True, text=True, timeout=120)
    assert first.returncode == 0 and first.stdout.strip() == "DBOSMaxStepRetriesExceeded", (first.stdout, first.stderr[-2000:])
    assert _status(sqlite3.connect(db)) == "ERROR"
    assert len(_paid(ledger)) == 3
    again = subprocess.run([sys.executable, "-c", FAILING_WORKER, db, ledger, "again"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stdout.strip() == "ERROR", (again.stdout, again.stderr[-2000:])
    assert _status(sqlite3.connect(db)) == "ERROR"
    assert len(_paid(ledger)) == 3  # nothing retried it


LAUNCH_WORKER = textwrap.dedent("""
    import sys
    from dbos import DBOS
    DBOS(config={"name": "repro", "system_database_url": f"sqlite:///{sys.argv[1]}", "log_level": "WARNING"})
    DBOS.launch()
    print("launched", flush=True)
""")

BUSY_TIMEOUT_S = 30.0  # DBOS's PRAGMA busy_timeout on each SQLite connection (dbos/_sys_db_sqlite.py)


def _hold_write_lock(db: str) -> sqlite3.Connection:
    """SQLite's write lock on ``db``, taken on a connection of the test's own and held until it is closed."""
    conn = sqlite3.connect(db, timeout=60, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    return conn


@pytest.mark.slow
def test_dbos_plain_a_launch_that_meets_a_held_write_lock_fails(tmp_path):
    """Goal: the claim-busy finding, without the harness: DBOS's launch does not retry a held
    write lock, unlike its workflows' writes. Method: a first process launches DBOS, which creates
    its tables; the test then holds SQLite's write lock on the file (BEGIN IMMEDIATE) while a
    second process launches DBOS: it exits non-zero with 'database is locked' after DBOS's busy
    timeout, once (no retry warning), though the lock is still held."""
    db = str(tmp_path / "dbos.sqlite")
    created = subprocess.run([sys.executable, "-c", LAUNCH_WORKER, db], capture_output=True, text=True, timeout=120)
    assert created.stdout.strip() == "launched", created.stderr[-2000:]
    holder = _hold_write_lock(db)
    try:
        started = time.monotonic()
        launch = subprocess.run([sys.executable, "-c", LAUNCH_WORKER, db], capture_output=True, text=True, timeout=300)
        elapsed_s = time.monotonic() - started
    finally:
        holder.close()
    assert launch.returncode != 0 and launch.stdout.strip() == "", (launch.returncode, launch.stdout)
    assert "database is locked" in launch.stderr, launch.stderr[-2000:]
    assert "Retrying" not in launch.stderr, launch.stderr[-2000:]
    assert elapsed_s >= BUSY_TIMEOUT_S - 1, f"gave up after {elapsed_s:.1f} s, before the busy timeout"


STEP_WORKER = textwrap.dedent("""
    import os, sys, time
    from dbos import DBOS, SetWorkflowID
    db, started, go = sys.argv[1], sys.argv[2], sys.argv[3]
    DBOS(config={"name": "repro", "system_database_url": f"sqlite:///{db}", "log_level": "WARNING"})

    @DBOS.step()
    def extract(doc):
        open(started, "w").close()
        while not os.path.exists(go):  # the call ends when the test says so, with the lock held
            time.sleep(0.05)
        return {"fields": doc}

    @DBOS.workflow()
    def pipeline(doc):
        return extract(doc)

    DBOS.launch()
    with SetWorkflowID("doc-1"):
        pipeline("doc-1")
    print(DBOS.retrieve_workflow("doc-1").get_status().status, flush=True)
""")

HELD_S = 45.0  # longer than DBOS's busy timeout: a writer that gave up after one would have done so
HELD_BOUND_S = 180.0  # DBOS's first retry is due at the busy timeout, 30 s after the step's result met the lock


@pytest.mark.slow
def test_dbos_plain_a_step_result_that_meets_a_held_lock_waits_as_long_as_the_lock_is_held(tmp_path):
    """Goal: the store-busy finding (hangs), without the harness: a step's result that meets a held
    write lock is retried for as long as the lock is held, past the busy timeout, with no overall
    deadline. Method: a process runs a workflow whose step waits for a file; the test takes
    SQLite's write lock, creates the file and holds the lock for longer than DBOS's busy timeout:
    the process is still alive, its workflow still PENDING, nothing raised, and DBOS has logged
    'database is locked' and a retry; once the lock is released, the workflow ends in SUCCESS."""
    db, started, go = (str(tmp_path / name) for name in ("dbos.sqlite", "started", "go"))
    with open(tmp_path / "stderr.txt", "w+") as stderr:
        worker = subprocess.Popen([sys.executable, "-c", STEP_WORKER, db, started, go], stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            _wait_for(lambda: os.path.exists(started), "the step's call")
            holder = _hold_write_lock(db)
            try:
                open(go, "w").close()
                held_since, logged = time.monotonic(), ""
                # At least HELD_S, and until DBOS has said it retries (later on a loaded machine), within a bound.
                while (time.monotonic() - held_since < HELD_S or "Retrying" not in logged) and time.monotonic() - held_since < HELD_BOUND_S:
                    assert worker.poll() is None, f"the worker exited with {worker.returncode} while the lock was held"
                    time.sleep(0.5)
                    stderr.seek(0)
                    logged = stderr.read()
                assert _status(holder) == "PENDING"  # read on the holding connection, within its transaction
            finally:
                holder.close()
            out, _ = worker.communicate(timeout=180)
        finally:
            worker.kill()
            worker.wait(timeout=10)
        stderr.seek(0)
        assert worker.returncode == 0 and out.strip() == "SUCCESS", (worker.returncode, out, stderr.read()[-2000:])
    assert "Traceback" not in logged, logged[-2000:]
    assert "database is locked" in logged and "Retrying" in logged, logged[-2000:]
    assert _status(sqlite3.connect(db)) == "SUCCESS"
