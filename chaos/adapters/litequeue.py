"""litequeue 0.9 running the reference pipeline (:mod:`chaos.adapters.queue_pipeline`), read from its own rows: one
row per message, a job's id and step inside its JSON. A consumer that dies holding a message leaves it locked for
good (litequeue has no lease): ``python -m chaos matrix --target chaos.adapters.litequeue:adapter --faults crash``."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import litequeue
from litequeue import LiteQueue

from chaos.adapters import queue_pipeline as pipeline
from chaos.adapters.rows import JobRows, MemoRows, OutboxRows, RowSchema

__all__ = ["LitequeueAdapter", "LitequeueSession", "adapter", "verbs"]

JOB = "json_extract(data, '$.job_id')"  # SQLite's own where a scalar is read: each consumer's memo check reads every row
AFTER = dict(job_id=JOB, step="json_extract(data, '$.after')", output="crashgate_json(data, '$.output')",
             where="json_extract(data, '$.after') IS NOT NULL")


def verbs(queue: LiteQueue, outbox: LiteQueue) -> pipeline.Verbs:
    def take() -> Any: return None if (m := queue.pop()) is None else (m.message_id, json.loads(m.data))
    def put(into: LiteQueue) -> Any: return lambda message: into.put(json.dumps(message, sort_keys=True))
    return pipeline.Verbs(take, put(queue), put(outbox), queue.done, queue.retry, queue.mark_failed)


class LitequeueSession(pipeline.QueueSession):
    def __init__(self, db: str, world: Any, worker_id: str) -> None:
        self.conn = sqlite3.connect(db, timeout=5, isolation_level=None, check_same_thread=False)
        queue, outbox = LiteQueue(self.conn), LiteQueue(self.conn, queue_name="outbox")
        self.queue, self.outbox, self.world, self.worker_id = verbs(queue, outbox), verbs(outbox, outbox), world, worker_id


class LitequeueAdapter(pipeline.QueuePipelineAdapter):
    name, lease_s = "litequeue", 30.0
    schema = RowSchema(  # no damage declared: litequeue hands a message out as stored, reading nothing in it
        JobRows(table="Queue", job_id=JOB, status="status", statuses={0: "ready", 1: "working", 2: "done", 3: "failed"},
                step="json_extract(data, '$.step')", payload="crashgate_json(data, '$.payload')",
                next_run_at="CASE WHEN status = 0 THEN json_extract(data, '$.not_before') END"),
        memos=(MemoRows("Queue", **AFTER), MemoRows("outbox", **AFTER)),
        outbox=OutboxRows("outbox", id="rowid", job_id=JOB, kind="json_extract(data, '$.kind')",
                          sent_at="CASE WHEN status = 2 THEN done_time END", key="json_extract(data, '$.key')"))
    library_files = (litequeue.__file__,)
    session_type = LitequeueSession

    def create_schema(self, conn: sqlite3.Connection) -> None:
        LiteQueue(conn), LiteQueue(conn, queue_name="outbox")


adapter = LitequeueAdapter
