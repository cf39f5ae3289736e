"""persist-queue 1.1.0's ``SQLiteAckQueue`` running the reference pipeline (:mod:`chaos.adapters.queue_pipeline`),
read from its own rows: one row per item, its status an integer, the job's id inside the pickled item; a consumer takes the
first item due by its id. Opening the queue resumes every unacknowledged item (``auto_resume``), a live consumer's too:
declared as the takeover it is. ``python -m chaos matrix --target chaos.adapters.persistqueue:adapter --faults crash,pause``"""

from __future__ import annotations

import os
import sqlite3
from contextlib import suppress
from typing import Any

from persistqueue import SQLiteAckQueue, sqlackqueue, sqlbase
from persistqueue.exceptions import Empty

from chaos.adapters import queue_pipeline as pipeline
from chaos.adapters.rows import AT_OPEN, JobRows, MemoRows, OutboxRows, RowSchema, register_decoders

__all__ = ["PersistQueueAdapter", "PersistQueueSession", "Queue", "adapter", "verbs"]

JOB = "crashgate_unpickle(data, 'job_id')"
AFTER = dict(job_id=JOB, step="crashgate_unpickle(data, 'after')", output="crashgate_unpickle(data, 'output')",
             where="crashgate_unpickle(data, 'after') IS NOT NULL")
STATUSES = {0: "ready", 1: "ready", 2: "working", 5: "done", 9: "failed"}  # persistqueue.sqlackqueue.AckStatus


class Queue(SQLiteAckQueue):
    """The library's queue, naming its writer (its resumption at open too), on its session's one connection."""

    def __init__(self, db: str, name: str, session: Any = None) -> None:
        self.session = session
        super().__init__(os.path.dirname(db), name=name, db_file_name=os.path.basename(db), timeout=5)

    def _new_db_connection(self, path: str, multithreading: bool, timeout: float) -> sqlite3.Connection:
        if getattr(self.session, "conn", None) is not None:
            return self.session.conn
        conn = register_decoders(super()._new_db_connection(path, True, timeout))  # True: usable from any thread
        conn.create_function("chaos_writer", 0, lambda: getattr(self.session, "writer", None))
        return conn

    def resume_unack_tasks(self) -> None:  # a peer frozen holding the write lock does not stop this process's opening
        with suppress(sqlite3.OperationalError):  # (the next process to open the queue resumes what this one could not)
            super().resume_unack_tasks()


def verbs(queue: Queue, outbox: Queue, session: Any = None) -> pipeline.Verbs:
    def take() -> Any:  # with a session: the first item due, chosen and taken in one write (nothing taken is put back)
        with suppress(Empty), pipeline.write_lock(session.conn) if session else suppress():
            if (due := session.first_due() if session else 0) is not None:  # 0: the queue's first item
                return (item := queue.get(block=False, id=due or None, raw=True))["pqid"], item["data"]
        return None
    return pipeline.Verbs(take, queue.put, outbox.put, lambda i: queue.ack(id=i), lambda i: queue.nack(id=i),
                          lambda i: queue.ack_failed(id=i), count=lambda i, message: queue.update(message, id=i))


class PersistQueueSession(pipeline.QueueSession):
    def __init__(self, db: str, world: Any, worker_id: str) -> None:
        self.writer, self.world, self.worker_id, self.conn = worker_id + AT_OPEN, world, worker_id, None  # opening resumes
        self.conn = (jobs := Queue(db, "jobs", self))._putter
        self.writer, self.queue, self.outbox = worker_id, verbs(jobs, outbox := Queue(db, "outbox", self), self), verbs(outbox, outbox)


class PersistQueueAdapter(pipeline.QueuePipelineAdapter):
    name, lease_s = "persist-queue", 30.0
    schema = RowSchema(  # no damage declared: the library unpickles an item only to hand it out
        JobRows(table="ack_queue_jobs", job_id=JOB, status="status", statuses=STATUSES, order="_id",
                step="crashgate_unpickle(data, 'step')", payload="crashgate_unpickle(data, 'payload')", takeover_at_open=True,
                next_run_at="CASE WHEN status < 2 THEN crashgate_unpickle(data, 'not_before') END"),
        memos=(MemoRows("ack_queue_jobs", **AFTER), MemoRows("ack_queue_outbox", **AFTER)),
        outbox=OutboxRows("ack_queue_outbox", id="_id", job_id=JOB, kind="crashgate_unpickle(data, 'kind')",
                          sent_at="CASE WHEN status = 5 THEN timestamp END", key="crashgate_unpickle(data, 'key')"))
    recovery, session_type = "at-open", PersistQueueSession  # a process opening the queue resumes the unacknowledged items
    library_files = (sqlackqueue.__file__, sqlbase.__file__)

    def create_schema(self, conn: sqlite3.Connection) -> None:
        db = conn.execute("PRAGMA database_list").fetchone()[2]
        Queue(db, "jobs").close(), Queue(db, "outbox").close()


adapter = PersistQueueAdapter
