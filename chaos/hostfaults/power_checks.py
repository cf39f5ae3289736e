"""What a power cut may take, and what it must leave: the checks after each one.

A power cut is judged against two snapshots of the engine's database: ``acknowledged``, read
after the worker was killed and before the cut (through the page cache: every commit that had
returned), and ``survived``, read after the file system came back. :func:`lost_commits` names
the difference: jobs gone, jobs sent back to an earlier state, memo rows gone, outbox rows gone,
sent marks gone. Then:

* ``integrity``: ``PRAGMA integrity_check`` is ``ok`` at every level (a transaction is wholly in
  the WAL or not at all, so a power cut never corrupts the file);
* ``durable-commits`` (under ``synchronous=FULL``): nothing is lost, every commit that returned
  was on the disk;
* under ``NORMAL`` the lost commits are counted and named, never a violation; each memo row lost
  is an interruption of its step (:func:`lost_interruptions`): the step runs and is paid again,
  its effect is sent again under the same key and applied once, and the whole invariant catalog
  must still hold with that allowance.

>>> from chaos.adapter import JobView, Snapshot
>>> before, after = Snapshot(), Snapshot()
>>> before.jobs["doc-1"] = JobView("extracted", "{}", None, None, 0.0)
>>> after.jobs["doc-1"] = JobView("extracting", "{}", "w-1", 120.0, 0.0)
>>> before.memos[("doc-1", "extract")] = "{}"
>>> lost_commits(before, after)
["job 'doc-1' went back from 'extracted' to 'extracting'", "memo row of job 'doc-1' step 'extract'"]
>>> lost_interruptions(before, after)
Counter({('doc-1', 'extract'): 1})
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, TYPE_CHECKING

from chaos.core.invariants import Violation

if TYPE_CHECKING:
    from chaos.adapter import Adapter

__all__ = ["DURABLE", "commits_lost", "durable_commits", "lost_commits", "lost_interruptions", "read_acknowledged"]

DURABLE = "durable-commits"  # the check's name, as violations and reports print it
NAMED_MAX = 20  # lost commits named in one violation; the rest are counted


def lost_commits(acknowledged: Any, survived: Any) -> list[str]:
    """Every acknowledged change the power cut rolled back, named (jobs, memo rows, outbox rows)."""
    lost = []
    for job_id, job in sorted(acknowledged.jobs.items()):
        now = survived.jobs.get(job_id)
        if now is None:
            lost.append(f"job {job_id!r} ({job.state}) was submitted and is gone")
        elif now.state != job.state:
            lost.append(f"job {job_id!r} went back from {job.state!r} to {now.state!r}")
    for job_id, step in sorted(set(acknowledged.memos) - set(survived.memos)):
        lost.append(f"memo row of job {job_id!r} step {step!r}")
    kept = {(row.job_id, row.kind): row for row in survived.outbox}
    for row in acknowledged.outbox:
        now = kept.get((row.job_id, row.kind))
        if now is None:
            lost.append(f"outbox row {row.kind!r} of job {row.job_id!r}")
        elif row.sent_at is not None and now.sent_at is None:
            lost.append(f"the sent mark of outbox row {row.kind!r} of job {row.job_id!r}")
    return lost


def lost_interruptions(acknowledged: Any, survived: Any, working: Mapping[str, str] | None = None) -> Counter:
    """The steps whose outcome the cut took, each one interruption: it runs, and may be paid, once more.

    An outcome is a memo row, and also any move out of the step's working state (``working``:
    working state -> step): a failure parked in a failed state, a retry scheduled, a review sent
    to a person. A poison failure earns no retry of its own, but once the cut has taken its
    record the step runs again as if it had never failed.
    """
    lost = Counter()
    if working:
        for job_id, before, _ in (Counter(acknowledged.transitions) - Counter(survived.transitions)).elements():
            if before in working:
                lost[(job_id, working[before])] += 1
    for key in set(acknowledged.memos) - set(survived.memos):
        if key not in lost:  # a memo written apart from its state change (not the reference engine's way)
            lost[key] += 1
    return lost


def durable_commits(level: str, acknowledged: Any, survived: Any) -> list[Violation]:
    """With ``synchronous=FULL``, a power cut loses no commit that returned.

    Protects against a store that acknowledges before its commit is on the disk: a connection
    left at ``synchronous=OFF`` or ``NORMAL`` while FULL was promised, a write path that returns
    before it commits, a batch flushed later. Held by SQLite's fsync of the WAL at every commit
    under FULL (PostgreSQL: ``fsync=on``, ``synchronous_commit=on``). Under any other level the
    lost commits are counted, not judged.
    """
    if level.upper() != "FULL":
        return []
    lost = lost_commits(acknowledged, survived)
    if not lost:
        return []
    named = "; ".join(lost[:NAMED_MAX]) + (f"; and {len(lost) - NAMED_MAX} more" if len(lost) > NAMED_MAX else "")
    return [Violation(DURABLE, f"synchronous=FULL, and the power cut lost {len(lost)} acknowledged commit(s): {named}")]


def commits_lost(acknowledged: Any, survived: Any) -> int:
    """How many acknowledged commits the cut took: the state changes the audit had recorded and
    lost (the engine moves a job in every commit but the sender's), plus the sent marks lost.

    A database after a power cut is a prefix of its history (SQLite's WAL, PostgreSQL's WAL):
    the lost state changes are the last ones (compared as multisets, since on PostgreSQL the
    audit's sequence numbers are taken in statement order, not commit order).
    """
    transitions = sum((Counter(acknowledged.transitions) - Counter(survived.transitions)).values())
    sent_before = {(r.job_id, r.kind) for r in acknowledged.outbox if r.sent_at is not None}
    sent_after = {(r.job_id, r.kind) for r in survived.outbox if r.sent_at is not None}
    return transitions + len(sent_before - sent_after)


def read_acknowledged(adapter: Adapter, db: str) -> Any:
    """``adapter.inspect(db)`` in a forked child that dies without closing its connection.

    The last connection to close on a WAL database checkpoints it, and a checkpoint fsyncs: a
    harness that read the database in its own process and closed the connection before the cut
    would make the commits durable itself, and every level would look like FULL. A child that
    ends with ``os._exit`` never closes, so nothing of the reading reaches the disk.
    """
    from chaos.core.process import run_in_child

    return run_in_child(lambda: adapter.inspect(db), what=f"reading {db} before the power cut")
