"""The shipped adapters of queue libraries without a job table (litequeue, persist-queue's
SQLiteAckQueue): the crash matrix, run on each through its declaration of the library's own rows,
shows the library's known weakness and no false finding; and each finding is reproduced without
the harness, with real processes and a real SIGKILL, so that the gate claims nothing the library
does not do."""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("litequeue")
pytest.importorskip("persistqueue")

from chaos.adapters.rows import AT_OPEN, JobRows, RowSchema  # noqa: E402
from chaos.matrix.runner import run_matrix  # noqa: E402
from matrix_findings import DAMAGE_FAMILIES, violations  # noqa: E402

LITEQUEUE = "chaos.adapters.litequeue:adapter"
PERSISTQUEUE = "chaos.adapters.persistqueue:adapter"


def test_litequeue_leaves_a_dead_consumers_message_locked_forever(tmp_path):
    """Goal: litequeue's known weakness shows. Method: crash the consumer at a seeded sample of
    points of a job's run, and let a consumer of a new identity take over once time has passed."""
    report = run_matrix(LITEQUEUE, families=["clean", "resume"], faults=["crash"], sample=12, workdir=str(tmp_path))
    found = violations(report)
    assert any(inv == "drains" and "still 'fetch:working'" in msg for inv, msg in found), found
    assert report.points >= 1


def test_the_damage_families_are_not_applicable_where_the_library_declares_nothing_to_damage(tmp_path):
    """Goal: no false finding from damaging rows the library never reads. Method: run the four
    damage families on both adapters, which declare no damage: each is skipped, saying why."""
    for target in (LITEQUEUE, PERSISTQUEUE):
        report = run_matrix(target, families=DAMAGE_FAMILIES, faults=["crash"], workdir=str(tmp_path / target.split(".")[2][:5]))
        assert sorted(report.skipped) == sorted(DAMAGE_FAMILIES), report.skipped
        assert all("damageable" in why for why in report.skipped.values()), report.skipped
        assert violations(report) == []


def test_persistqueue_pays_twice_for_an_item_of_a_paused_consumer(tmp_path):
    """Goal: persist-queue's known weakness shows, and its resumption at open is not a write
    without a claim. Method: freeze the consumer at a seeded sample of points while another worker
    opens the queue (which resumes the frozen consumer's item) and runs; then wake the frozen one."""
    report = run_matrix(PERSISTQUEUE, families=["clean"], faults=["pause"], sample=30, workdir=str(tmp_path))
    found = violations(report)
    assert any(inv == "bounded-spend" and "2 paid calls" in msg for inv, msg in found), found
    # The opener's resumption is its claim: only the woken consumer may write after another's claim
    # (it rarely does: finding its step's memo, it puts no next message).
    fenced = [msg for inv, msg in found if inv == "fenced-writes"]
    assert all(msg.startswith("worker 'w-doomed'") for msg in fenced), fenced


def test_a_crash_with_persistqueue_is_taken_over_at_open_without_a_fenced_writes_finding(tmp_path):
    """Goal: the takeover at open is recorded as a claim. Method: kill the consumer right after it
    took an item (the resume family); the next process to open the queue resumes and finishes it."""
    report = run_matrix(PERSISTQUEUE, families=["resume"], faults=["crash"], sample=6, workdir=str(tmp_path))
    assert [f for f in violations(report) if f[0] == "fenced-writes"] == []


# -- every finding is the library's own: none is the pipeline's making -------------------------------------------

# The families whose findings were once the pipeline's own (a retry at once, no attempt limit, a
# store error raised out of the loop, a next message put twice), beside the ones that show each
# library's weakness: run with crash and pause faults, each adapter's findings must all be one
# of its library's known weaknesses.
PIPELINE_FAMILIES = ["clean", "resume", "give-up", "retry-storm", "extract-outage", "commit-io-error", "claim-io-error",
                     "sender-read-error", "disk-full", "store-busy", "sender-busy"]
SECOND_WORKER_FAMILIES = ["stalled-call", "lost-lease"]  # a second process opens the queue while the first is live
STUCK = r"job '[^']+' is still '\w+:working' after the system drained|outbox row '[^']+' is still unsent after the system drained"
# litequeue: a taken message whose consumer died, or could not write it back, is never handed out again.
LOCKED_FOREVER = {
    "drains": STUCK,
    "same-outcome": r"job '[^']+' ended '\w+:working' after the fault|the effects applied differ from those without any fault: missing",
    "baseline": r"fails without any fault, on every one of its points: job '[^']+' ended '\w+:working'",
}
# persist-queue: one item run by two consumers (resumed at another process's open, or taken again by a
# consumer frozen between its read and its claim, even once done or failed): its step paid for twice.
TWO_CONSUMERS = {
    "bounded-spend": r"step '\w+': \d+ paid calls, at most \d+ allowed",
    "no-spend-after-memo": r"worker '[^']+' paid for '\w+' of job '[^']+' .* after that step's memo was committed",
    "legal-transitions": r"moved '\w+:(done|failed)' -> '\w+:working'",
    "fenced-writes": r"worker 'w-doomed' wrote .* after '[^']+' had taken it over",
}


def unexpected_findings(report, weaknesses: dict[str, str], *, only_under: tuple[str, ...] = ()) -> list[str]:
    """Each finding (a point's or a baseline's) that is not one of ``weaknesses`` ({invariant:
    pattern of its message}); with ``only_under``, also each one found under another fault kind,
    outside the baselines of the second-worker families."""
    out = []
    found = [(r.fault, r.id, v) for r in report.results for v in r.outcome.violations]
    found += [("baseline", family, v) for family, o in report.baselines.items() for v in o.violations]
    for fault, where, v in found:
        pattern = weaknesses.get(v.invariant)
        if pattern is None or not re.search(pattern, v.detail):
            out.append(f"{where} ({fault}): {v.invariant}: {v.detail}")
        elif only_under and not fault.startswith(only_under) and where not in SECOND_WORKER_FAMILIES:
            out.append(f"{where} ({fault}), not under {only_under}: {v.invariant}: {v.detail}")
    return out


def test_litequeue_findings_are_only_its_locked_messages(tmp_path):
    """Goal: the litequeue card claims nothing the library does not do. Method: the families that
    once failed by the pipeline's doing, with crash and pause faults at a seeded sample of points;
    every finding left is a message locked for good, and the retry, store-error and give-up
    families that failed with no fault at all now hold in their baselines (or are stuck only there)."""
    report = run_matrix(LITEQUEUE, families=PIPELINE_FAMILIES, faults=["crash", "pause"], sample=8, workdir=str(tmp_path))
    assert unexpected_findings(report, LOCKED_FOREVER) == []
    held = ["retry-storm", "extract-outage", "claim-io-error", "sender-read-error"]  # the pipeline's own, before
    assert [f for f in held if report.baselines[f].violations] == [], {f: report.baselines[f].violations for f in held}
    assert any(v.invariant == "drains" for f in ("resume", "commit-io-error") for v in report.baselines[f].violations)


def test_persistqueue_findings_are_only_one_item_run_by_two_consumers(tmp_path):
    """Goal: the persist-queue card claims nothing the library does not do. Method: the same
    families, and two whose second worker opens the queue while the first is live, with crash and
    pause faults at a seeded sample of points: every finding is an item run by two consumers, under
    a pause or a live peer's open; a crash alone leaves none, and the once failing baselines hold."""
    report = run_matrix(PERSISTQUEUE, families=PIPELINE_FAMILIES + SECOND_WORKER_FAMILIES, faults=["crash", "pause"],
                        sample=10, workdir=str(tmp_path))
    assert unexpected_findings(report, TWO_CONSUMERS, only_under=("pause",)) == []
    assert [f for f in PIPELINE_FAMILIES if report.baselines[f].violations] == [], report.baselines
    assert report.baselines["give-up"].violations == []  # the attempt limit parks the job its dead consumers took


def test_persistqueue_never_holds_two_messages_of_one_step(tmp_path):
    """Goal: no false legal-transitions finding on persist-queue's retries. Method: the retry-storm
    family under pauses, at a seeded sample of points. The pipeline once put a retried message, or
    one taken before it was due, back as a new copy and marked the original done in a second commit
    (persist-queue commits each write): a consumer frozen between the two, whose item another
    process's opening resumed, left the job two messages of one step, and the original ran while
    the copy was the job's current row ('extract:ready' -> 'verify:ready'). A retry now rewrites the
    item in place and hands it out again, and a consumer takes the first item due by its id."""
    report = run_matrix(PERSISTQUEUE, families=["retry-storm"], faults=["pause"], sample=16, workdir=str(tmp_path))
    moves = [(r.id, r.fault, v.detail) for r in report.results for v in r.outcome.violations if v.invariant == "legal-transitions"]
    assert [m for m in moves if not re.search(TWO_CONSUMERS["legal-transitions"], m[2])] == [], moves
    assert report.results, "the family ran no scenario"


def _audited(tmp_path, schema: RowSchema) -> sqlite3.Connection:
    conn = sqlite3.connect(tmp_path / "q.db", isolation_level=None)
    conn.execute("CREATE TABLE q (data TEXT, status INTEGER)")
    schema.install(conn, attribute_writers=True)
    return conn


@pytest.mark.parametrize("declared", [True, False])
def test_a_resumption_at_open_is_a_claim_only_where_it_is_declared(tmp_path, declared):
    """A worker opening the queue moves a claimed row back to ready: with ``takeover_at_open``
    that is its claim; without, a state write after another worker's claim (what fenced-writes
    reports)."""
    schema = RowSchema(JobRows(table="q", job_id="crashgate_json(data, '$.job_id')", status="status",
                               statuses={0: "ready", 1: "working", 2: "done"}, takeover_at_open=declared))
    conn = _audited(tmp_path, schema)
    writer = {"name": "w-a"}
    conn.create_function("chaos_writer", 0, lambda: writer["name"])
    conn.execute("INSERT INTO q VALUES (?, 0)", ('{"job_id": "doc-1"}',))
    conn.execute("UPDATE q SET status = 1")
    writer["name"] = "w-b" + AT_OPEN
    conn.execute("UPDATE q SET status = 0")
    snap = schema.snapshot(conn)
    assert snap.transitions == [("doc-1", None, "ready"), ("doc-1", "ready", "working"), ("doc-1", "working", "ready")]
    expected = ("doc-1", "claim", "w-b", "ready") if declared else ("doc-1", "state", "w-b", "working -> ready")
    assert snap.writes[-1] == expected
    assert snap.jobs["doc-1"].state == "ready"


def test_a_job_is_its_current_row_and_its_state_names_the_rows_step(tmp_path):
    """A job of several rows (one message per step) is read from the newest: its state is
    ``<step>:<status>``; a row that is not the current one changes no state, and marking it done is
    no write to the job (a consumer marking its message done after another took the next one
    writes after no takeover: no fenced-writes finding)."""
    schema = RowSchema(JobRows(table="q", job_id="crashgate_json(data, '$.job_id')", status="status",
                               statuses={0: "ready", 1: "working", 2: "done"}, step="crashgate_json(data, '$.step')"))
    conn = _audited(tmp_path, schema)
    conn.create_function("chaos_writer", 0, lambda: "w-a")
    conn.execute("INSERT INTO q VALUES (?, 0)", ('{"job_id": "doc-1", "step": "fetch"}',))
    conn.execute("UPDATE q SET status = 1 WHERE rowid = 1")
    conn.execute("INSERT INTO q VALUES (?, 0)", ('{"job_id": "doc-1", "step": "extract"}',))
    conn.execute("UPDATE q SET status = 2 WHERE rowid = 1")
    snap = schema.snapshot(conn)
    assert [t[2] for t in snap.transitions] == ["fetch:ready", "fetch:working", "extract:ready"]
    assert snap.jobs["doc-1"].state == "extract:ready"
    assert [w[1] for w in snap.writes] == ["state", "claim", "state"]


def test_a_snapshot_replays_only_the_audit_written_since_the_last_one_on_its_connection(tmp_path):
    """A drain inspects the store after each round: each snapshot on a connection reads the copies
    of rows written since the one before (what one of a new connection, replaying all, reads too),
    and an audit rewritten under the connection (a new file at the same place) is replayed whole."""
    schema = RowSchema(JobRows(table="q", job_id="crashgate_json(data, '$.job_id')", status="status",
                               statuses={0: "ready", 1: "working", 2: "done"}, step="crashgate_json(data, '$.step')"))
    conn = _audited(tmp_path, schema)
    conn.create_function("chaos_writer", 0, lambda: "w-a")
    reader = sqlite3.connect(tmp_path / "q.db", isolation_level=None)
    conn.execute("INSERT INTO q VALUES (?, 0)", ('{"job_id": "doc-1", "step": "fetch"}',))
    conn.execute("UPDATE q SET status = 1")
    first = schema.snapshot(reader)
    replayed = []
    reader.set_trace_callback(lambda sql: replayed.append(sql) if "FROM chaos_rows WHERE chaos_seq > " in sql else None)
    conn.execute("INSERT INTO q VALUES (?, 0)", ('{"job_id": "doc-1", "step": "extract"}',))
    conn.execute("UPDATE q SET status = 2 WHERE rowid = 1")
    second = schema.snapshot(reader)
    assert replayed == [replayed[0]] and replayed[0].endswith("chaos_seq > 2 ORDER BY chaos_seq"), replayed
    whole = schema.snapshot(sqlite3.connect(tmp_path / "q.db", isolation_level=None))
    assert (second.transitions, second.writes, second.jobs) == (whole.transitions, whole.writes, whole.jobs)
    assert second.transitions[:len(first.transitions)] == first.transitions
    assert [t[2] for t in second.transitions] == ["fetch:ready", "fetch:working", "extract:ready"]
    # The file rewritten in place with another history of as many copies: the replay starts over.
    conn.execute("DELETE FROM chaos_rows")
    conn.execute("DELETE FROM q")
    conn.execute("DELETE FROM chaos_rows")
    conn.execute("INSERT INTO q VALUES (?, 0)", ('{"job_id": "doc-2", "step": "fetch"}',))
    conn.execute("INSERT INTO q VALUES (?, 0)", ('{"job_id": "doc-3", "step": "fetch"}',))
    conn.execute("UPDATE q SET status = 1 WHERE rowid = 1")
    conn.execute("UPDATE q SET status = 1 WHERE rowid = 2")
    again = schema.snapshot(reader)
    assert sorted(again.jobs) == ["doc-2", "doc-3"]
    assert [t[0] for t in again.transitions] == ["doc-2", "doc-3", "doc-2", "doc-3"]


def test_a_declaration_naming_what_the_table_does_not_have_is_refused(tmp_path):
    conn = sqlite3.connect(tmp_path / "q.db")
    conn.execute("CREATE TABLE q (data TEXT, status INTEGER)")
    schema = RowSchema(JobRows(table="q", job_id="crashgate_json(payload, '$.id')", status="status"))
    with pytest.raises(ValueError, match=r"JobRows\(job_id=...\) .* does not read table 'q': no such column: payload"):
        schema.check(conn)


# -- the findings, reproduced without the harness: real processes, a real kill ----------------------

CONSUMER = textwrap.dedent("""
    import sys, time
    kind, db = sys.argv[1], sys.argv[2]
    if kind == "litequeue":
        from litequeue import LiteQueue
        message = LiteQueue(db).pop()
        print(message.message_id, flush=True)
    else:
        import os
        from persistqueue import SQLiteAckQueue
        item = SQLiteAckQueue(os.path.dirname(db), db_file_name=os.path.basename(db)).get(block=False, raw=True)
        print(item["pqid"], flush=True)
    time.sleep(60)  # the consumer's long step: killed or frozen here
""")


def _consumer(kind: str, db: str) -> tuple[subprocess.Popen, str]:
    child = subprocess.Popen([sys.executable, "-c", CONSUMER, kind, db], stdout=subprocess.PIPE, text=True)
    taken = child.stdout.readline().strip()
    assert taken, f"the {kind} consumer took nothing (exit {child.poll()})"
    return child, taken


def test_litequeue_plain_a_message_whose_consumer_was_killed_is_never_handed_out_again(tmp_path):
    """The drains finding, without the harness: a consumer process takes a message and is
    SIGKILLed; every consumer opened after it finds nothing to take, and the message stays locked."""
    from litequeue import LiteQueue, MessageStatus

    db = str(tmp_path / "queue.db")
    put = LiteQueue(db).put("doc-1").message_id
    child, taken = _consumer("litequeue", db)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=10)
    assert taken == put
    later = LiteQueue(db)
    assert later.pop() is None
    assert later.get(put).status == MessageStatus.LOCKED


def test_persistqueue_plain_a_paused_consumers_item_is_handed_to_a_second_consumer(tmp_path):
    """The bounded-spend finding, without the harness: a consumer process takes an item and is
    frozen (SIGSTOP); a second process opening the queue resumes the item and takes it too, so the
    step it stands for is paid for twice once the first wakes; then the first is SIGKILLed."""
    from persistqueue import SQLiteAckQueue

    db = str(tmp_path / "queue.db")
    first = SQLiteAckQueue(str(tmp_path), db_file_name="queue.db")
    put = first.put({"job_id": "doc-1"})
    first.close()
    child, taken = _consumer("persistqueue", db)
    try:
        os.kill(child.pid, signal.SIGSTOP)
        second = SQLiteAckQueue(str(tmp_path), db_file_name="queue.db")  # opening resumes the frozen consumer's item
        again = second.get(block=False, raw=True)
        assert int(taken) == put
        assert again["pqid"] == put
        second.close()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)


# A consumer that takes one message, says which on its stdout, then waits for a line on its stdin
# before it finishes (litequeue: marks the message done; persist-queue: pays, records the payment in
# the ledger file, acknowledges): the test decides when that happens, and what the store is doing then.
STEPWISE = textwrap.dedent("""
    import os, sqlite3, sys
    kind, db, ledger = sys.argv[1], sys.argv[2], sys.argv[3]
    if kind == "litequeue":
        from litequeue import LiteQueue
        queue = LiteQueue(db, timeout=0.2)  # the consumer's busy timeout
        message = queue.pop()
        print(message.message_id, flush=True)
        sys.stdin.readline()
        try:
            queue.done(message.message_id)
        except sqlite3.Error as exc:  # a careful consumer hands the message out again; that write fails too
            try:
                queue.retry(message.message_id)
            except sqlite3.Error:
                pass
            print(f"{type(exc).__name__}: {exc}", flush=True)
            sys.exit(3)
        print("done", flush=True)
    else:
        from persistqueue import SQLiteAckQueue
        queue = SQLiteAckQueue(os.path.dirname(db), db_file_name=os.path.basename(db))
        item = queue.get(block=False, raw=True)
        print(item["pqid"], flush=True)
        sys.stdin.readline()
        with open(ledger, "a") as paid:  # the paid call, recorded where no crash of the consumer undoes it
            paid.write(f"{item['pqid']} {os.getpid()}\\n")
        queue.ack(id=item["pqid"])
        print("done", flush=True)
""")


def _stepwise(kind: str, db: str, ledger: str = "", fiu_ctrl: str = "") -> tuple[subprocess.Popen, str]:
    command = [sys.executable, "-c", STEPWISE, kind, db, ledger]
    if fiu_ctrl:
        command = ["fiu-run", "-x", "-f", fiu_ctrl, *command]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    taken = child.stdout.readline().strip()
    assert taken, f"the {kind} consumer took nothing (exit {child.poll()})"
    return child, taken


def _go_on(child: subprocess.Popen) -> tuple[int, str]:
    """Let a stepwise consumer finish; its exit code and what it said."""
    out, _ = child.communicate("go\n", timeout=20)
    return child.returncode, out.strip()


def test_litequeue_plain_a_message_whose_done_met_a_lock_is_never_handed_out_again(tmp_path):
    """The drains finding under a held lock, without the harness: a consumer process takes a
    message and runs its step; another process holds the write lock (``BEGIN IMMEDIATE``) past the
    consumer's busy timeout, so that its ``done()`` (and the ``retry()`` that would hand the message
    out again) fails; once the lock is gone, no consumer takes the message again: it stays locked."""
    from litequeue import LiteQueue, MessageStatus

    db = str(tmp_path / "queue.db")
    put = LiteQueue(db).put("doc-1").message_id
    child, taken = _stepwise("litequeue", db)
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        code, said = _go_on(child)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert taken == put
    assert code == 3, said
    assert "database is locked" in said, said
    later = LiteQueue(db)
    assert later.pop() is None
    assert later.get(put).status == MessageStatus.LOCKED


@pytest.mark.skipif(shutil.which("fiu-run") is None or shutil.which("fiu-ctrl") is None, reason="libfiu's fiu-run and fiu-ctrl are not installed")
def test_litequeue_plain_a_message_whose_done_met_an_io_error_is_never_handed_out_again(tmp_path):
    """The drains finding under an I/O error, without the harness: a consumer process started under
    libfiu takes a message; every ``pwrite`` of that process then fails with EIO (enabled from outside
    with ``fiu-ctrl``), so that its ``done()`` cannot write the database; it exits, and no consumer
    takes the message again: it stays locked."""
    from litequeue import LiteQueue, MessageStatus

    db, ctrl = str(tmp_path / "queue.db"), str(tmp_path / "fiu-ctrl")
    put = LiteQueue(db).put("doc-1").message_id
    child, taken = _stepwise("litequeue", db, fiu_ctrl=ctrl)
    enabled = subprocess.run(["fiu-ctrl", "-f", ctrl, "-c", f"enable name=posix/io/rw/pwrite,failinfo={errno.EIO}",
                              str(child.pid)], capture_output=True, text=True, timeout=20)
    assert enabled.returncode == 0, enabled.stderr
    code, said = _go_on(child)
    assert taken == put
    assert code == 3, said
    assert "disk I/O error" in said, said
    later = LiteQueue(db)
    assert later.pop() is None
    assert later.get(put).status == MessageStatus.LOCKED


def test_persistqueue_plain_a_paused_consumers_item_is_processed_twice(tmp_path):
    """The bounded-spend finding, without the harness: a consumer process takes an item and is
    frozen (SIGSTOP) before it pays and acknowledges; a second consumer process opening the queue
    resumes the item, takes it, pays (a line in the ledger file) and acknowledges; the first is
    woken (SIGCONT) and pays for the same item again."""
    from persistqueue import SQLiteAckQueue

    db, ledger = str(tmp_path / "queue.db"), tmp_path / "ledger"
    first = SQLiteAckQueue(str(tmp_path), db_file_name="queue.db")
    put = first.put({"job_id": "doc-1"})
    first.close()
    frozen, taken = _stepwise("persistqueue", db, str(ledger))
    try:
        os.kill(frozen.pid, signal.SIGSTOP)
        second, again = _stepwise("persistqueue", db, str(ledger))  # its opening resumes the frozen consumer's item
        assert _go_on(second) == (0, "done")
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    assert _go_on(frozen) == (0, "done")
    assert int(taken) == put
    assert int(again) == put
    paid = ledger.read_text().split("\n")[:-1]
    assert sorted(line.split()[1] for line in paid) == sorted([str(frozen.pid), str(second.pid)]), paid
    assert [line.split()[0] for line in paid] == [str(put), str(put)], paid
