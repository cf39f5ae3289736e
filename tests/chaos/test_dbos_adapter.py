"""The shipped DBOS Transact adapter (chaos.adapters.dbos): the crash matrix, run on DBOS's own
tables through the rows declaration and on DBOS's own connection pool, shows DBOS's known weakness
with its default executor id (a second launch recovers a live workflow and pays for its current
step again) and no false finding; and the weakness is reproduced without the harness, with two
real processes, a real SIGSTOP and a real SIGKILL."""

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


def _unexplained(report) -> list[str]:
    out = [f"baseline of {name}: {v.invariant}: {v.detail}" for name, outcome in report.baselines.items()
           for v in outcome.violations if (name, v.invariant) not in BASELINE_FINDINGS]
    for result in report.results:
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
    assert _unexplained(report) == []
    assert elapsed_s < WHOLE_BOUND_S, f"the sampled matrix took {elapsed_s:.0f} s"


WHOLE_SAMPLE = 159  # three points a family on average, as the adapter how-to's command
WHOLE_BOUND_S = 1800.0  # about 6 minutes on two idle cores; every scenario is bounded by the watchdog
