"""The shipped adapter of huey (``SqliteHuey``, a pipeline of tasks chained with ``then``), which has
no job table and deletes a message as it dequeues it: the crash matrix, run through its declaration
of huey's own rows, shows huey's known weaknesses and no false finding; and each finding is
reproduced without the harness, with a real huey consumer and a real SIGKILL (or a real lock held
by another process), so that the gate claims nothing huey does not do."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("huey")

from chaos.matrix.runner import run_matrix  # noqa: E402
from matrix_findings import DAMAGE_FAMILIES, violations  # noqa: E402

HUEY = "chaos.adapters.huey:adapter"


def test_huey_loses_a_task_killed_after_its_dequeue_and_a_pipeline_killed_before_its_next_task(tmp_path):
    """Goal: huey's two crash weaknesses show, each stuck state its own finding. Method: crash the
    consumer at a seeded sample of points of a job's run, and at the point right after a dequeue
    (the resume family's dead consumer); recover with a consumer of a new identity."""
    report = run_matrix(HUEY, families=["clean", "resume"], faults=["crash"], sample=150, workdir=str(tmp_path))
    stuck = {msg for inv, msg in violations(report) if inv == "drains"}
    # A task whose message was deleted at its dequeue and whose result was never stored: lost.
    assert "job 'doc-1' is still 'fetch:working' after the system drained" in stuck, stuck
    # A result stored, the next task never enqueued: the rest of the pipeline is lost.
    assert any(msg.endswith(":done' after the system drained") for msg in stuck), stuck
    assert report.points >= 100


def test_huey_loses_a_task_whose_result_meets_a_held_lock_or_an_io_error(tmp_path):
    """Goal: huey's store weakness shows. Method: the write after the extract step's paid call
    (huey's put_result, after the dequeue) meets a write lock held by another process past the
    busy timeout, or a disk that fails it; huey's consumer logs the error and goes on."""
    report = run_matrix(HUEY, families=["store-busy", "commit-io-error"], faults=["crash"], sample=4, workdir=str(tmp_path))
    found = violations(report)
    for family in ("store-busy", "commit-io-error"):
        assert ("baseline", f"family '{family}' fails without any fault, on every one of its points: job 'doc-1' ended "
                "'extract:working'") in [(inv, msg[:len(f"family '{family}' fails without any fault, on every one of its points: "
                                                       "job 'doc-1' ended 'extract:working'")]) for inv, msg in found], found


def test_huey_shows_no_false_finding_where_nothing_is_lost(tmp_path):
    """Goal: no false finding. Method: the damage families are not applicable (the adapter declares
    nothing huey reads to damage); a delivery that fails once (send fault in the task that sends the
    effect) and a poison answer end as they do without a crash, wherever the consumer is killed
    before its dequeue or after its task is wholly done."""
    report = run_matrix(HUEY, families=DAMAGE_FAMILIES, faults=["crash"], workdir=str(tmp_path / "damage"))
    assert sorted(report.skipped) == sorted(DAMAGE_FAMILIES), report.skipped
    assert violations(report) == []
    report = run_matrix(HUEY, families=["sender-fail", "extract-400", "extract-timeout"], faults=["crash"], sample=40,
                        workdir=str(tmp_path / "faults"))
    found = violations(report)
    assert [f for f in found if f[0] in ("bounded-spend", "no-spend-after-memo", "legal-transitions", "fenced-writes",
                                         "progress-recorded", "memo-stable", "baseline", "raised")] == [], found
    # Every other finding is a task lost at a crash: a job stuck in a step, or an effect never sent.
    assert all("after the system drained" in msg or inv in ("same-outcome", "effects-complete", "outbox-at-least-once")
               for inv, msg in found), found


# -- the findings, reproduced without the harness: a real huey consumer, a real kill --------------------------------

TASKS = textwrap.dedent("""
    import os, sys, time
    from huey import SqliteHuey, signals
    huey = SqliteHuey("plain", filename=os.environ["HUEY_DB"], timeout=float(os.environ.get("HUEY_TIMEOUT", "5")))
    MARK = os.environ["HUEY_MARK"]

    def mark(what):
        with open(MARK, "a") as f:
            f.write(what + "\\n")

    @huey.task()
    def step(name):
        mark("running " + name)
        if os.environ.get("HUEY_HOLD") == "task":
            time.sleep(60)  # the task's long call: killed here
        if os.environ.get("HUEY_HOLD") == "lock":
            while not os.path.exists(MARK + ".locked"):
                time.sleep(0.05)  # until another process holds the write lock
        return name + " done"

    @huey.signal(signals.SIGNAL_COMPLETE)
    def completed(signal, task):  # huey emits it after storing the result, before enqueuing the next task
        mark("stored " + task.id)
        if os.environ.get("HUEY_HOLD") == "next":
            time.sleep(60)  # killed here
""")


def _consumer(tmp_path, hold: str, *, timeout_s: float = 5.0) -> tuple[subprocess.Popen, object]:
    """huey's own consumer (huey_consumer, one worker) on the pipeline's module, in a process of its own."""
    (tmp_path / "plain_tasks.py").write_text(TASKS)
    env = {**os.environ, "HUEY_DB": str(tmp_path / "huey.db"), "HUEY_MARK": str(tmp_path / "mark"), "HUEY_HOLD": hold,
           "HUEY_TIMEOUT": str(timeout_s), "PYTHONPATH": str(tmp_path)}
    child = subprocess.Popen([sys.executable, "-m", "huey.bin.huey_consumer", "plain_tasks.huey", "-w", "1", "-d", "0.05"],
                             cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return child, env


def _wait_for(path, text: str, child: subprocess.Popen) -> None:
    for _ in range(600):  # 30 s at most
        if path.exists() and text in path.read_text():
            return
        if child.poll() is not None:
            raise AssertionError(f"the consumer exited {child.returncode} before {text!r}")
        subprocess.run(["sleep", "0.05"])
    raise AssertionError(f"the consumer never reached {text!r}: {path.read_text() if path.exists() else ''}")


def _huey(tmp_path):
    os.environ["HUEY_DB"], os.environ["HUEY_MARK"] = str(tmp_path / "huey.db"), str(tmp_path / "mark")
    (tmp_path / "plain_tasks.py").write_text(TASKS)
    sys.path.insert(0, str(tmp_path))
    sys.modules.pop("plain_tasks", None)
    import plain_tasks
    sys.path.remove(str(tmp_path))
    return plain_tasks


def test_huey_plain_a_task_killed_after_its_dequeue_is_lost(tmp_path):
    """The drains finding ('fetch:working'), without the harness: huey's consumer dequeues a task
    and is SIGKILLed while it runs; the queue is empty, no result is stored, and a new consumer
    never runs the task."""
    tasks = _huey(tmp_path)
    result = tasks.step("fetch")
    child, _ = _consumer(tmp_path, "task")
    try:
        _wait_for(tmp_path / "mark", "running fetch", child)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        assert tasks.huey.pending_count() == 0  # the message was deleted at its dequeue
        assert result.get() is None  # and no result was stored
        assert sqlite3.connect(tmp_path / "huey.db").execute("SELECT COUNT(*) FROM task").fetchone() == (0,)
    finally:
        child.kill()
        child.wait(timeout=10)


def test_huey_plain_a_pipeline_killed_between_storing_a_result_and_enqueuing_the_next_task_loses_the_rest(tmp_path):
    """The drains finding ('fetch:done'), without the harness: huey's consumer runs a pipeline's
    first task, stores its result and is SIGKILLed before it enqueues the next; the result is
    there, and the next task is in no queue."""
    tasks = _huey(tmp_path)
    first = tasks.step.s("fetch").then(tasks.step, "extract")
    tasks.huey.enqueue(first)
    child, _ = _consumer(tmp_path, "next")
    try:
        _wait_for(tmp_path / "mark", "stored", child)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        assert tasks.huey.result(first.id) == "fetch done"  # the first task's result is stored
        assert tasks.huey.pending_count() == 0  # its next task was never enqueued
        assert tasks.huey.result(first.on_complete.id) is None
    finally:
        child.kill()
        child.wait(timeout=10)


def test_huey_plain_a_held_lock_at_put_result_loses_the_task(tmp_path):
    """The store-busy finding, without the harness: while huey's consumer runs a dequeued task,
    another process holds the database's write lock past the consumer's busy timeout; storing the
    result fails, huey logs it, and the task is in no queue and has no result, for good."""
    tasks = _huey(tmp_path)
    result = tasks.step("extract")
    child, _ = _consumer(tmp_path, "lock", timeout_s=0.5)
    locker = sqlite3.connect(tmp_path / "huey.db", isolation_level=None)
    try:
        _wait_for(tmp_path / "mark", "running extract", child)
        locker.execute("BEGIN IMMEDIATE")  # the write lock, held by this process
        (tmp_path / "mark.locked").write_text("")
        subprocess.run(["sleep", "3"])  # the consumer's busy timeout (0.5 s) passes
        locker.execute("ROLLBACK")
        subprocess.run(["sleep", "1"])
        assert "stored" not in (tmp_path / "mark").read_text()
        assert child.poll() is None  # the consumer lives on
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        assert tasks.huey.pending_count() == 0
        assert result.get() is None
    finally:
        locker.close()
        child.kill()
        child.wait(timeout=10)


def test_a_huey_worker_opens_while_another_process_holds_the_write_lock(tmp_path):
    """The raised finding under a pause, gone: SqliteHuey creates its tables under "begin exclusive"
    at each opening unless told not to (create_tables, huey 3.2.0), so a worker opened while a peer
    holds the write lock raised "database is locked". The adapter's sessions open huey without it
    (its tables are made once, by create_schema): with another process holding the write lock, a
    worker opens and its iteration answers "busy" or "idle", raising nothing."""
    from chaos.adapters.huey import HueyAdapter, HueySession

    db = tmp_path / "huey.db"
    HueyAdapter().create_schema(sqlite3.connect(db))
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sqlite3, sys
        conn = sqlite3.connect(sys.argv[1], isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        print("held", flush=True)
        sys.stdin.readline()
    """), str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        session = HueySession(str(db), None, "w-1")  # before: OperationalError: database is locked, after huey's 5 s
        session.set_busy_timeout(0.2)
        assert session.run_once() in ("busy", "idle")
        session.close()
    finally:
        holder.communicate("done\n", timeout=20)
