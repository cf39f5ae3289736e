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

JOB = "crashgate_json(data, '$.job_id')"
AFTER = dict(job_id=JOB, step="crashgate_json(data, '$.after')", output="crashgate_json(data, '$.output')",
             where="crashgate_json(data, '$.after') IS NOT NULL")


def verbs(queue: LiteQueue, outbox: LiteQueue) -> pipeline.Verbs:
    def take() -> Any: return None if (m := queue.pop()) is None else (m.message_id, json.loads(m.data))
    def put(into: LiteQueue) -> Any: return lambda message: into.put(json.dumps(message, sort_keys=True))
    return pipeline.Verbs(take, put(queue), put(outbox), queue.done, queue.retry, queue.mark_failed)


class LitequeueSession(pipeline.QueueSession):
    select_submitted = "SELECT 1 FROM Queue WHERE json_extract(data, '$.job_id') = ? LIMIT 1"

    def __init__(self, db: str, world: Any, worker_id: str) -> None:
        self.conn = sqlite3.connect(db, timeout=5, isolation_level=None, check_same_thread=False)
        queue, outbox = LiteQueue(self.conn), LiteQueue(self.conn, queue_name="outbox")
        self.queue, self.outbox, self.world, self.worker_id = verbs(queue, outbox), verbs(outbox, outbox), world, worker_id


class LitequeueAdapter(pipeline.QueuePipelineAdapter):
    name, lease_s = "litequeue", 30.0
    schema = RowSchema(  # no damage declared: litequeue hands a message out as stored, reading nothing in it
        JobRows(table="Queue", job_id=JOB, status="status", statuses={0: "ready", 1: "working", 2: "done", 3: "failed"},
                step="crashgate_json(data, '$.step')", payload="crashgate_json(data, '$.payload')"),
        memos=(MemoRows("Queue", **AFTER), MemoRows("outbox", **AFTER)),
        outbox=OutboxRows("outbox", id="rowid", job_id=JOB, kind="crashgate_json(data, '$.kind')",
                          sent_at="CASE WHEN status = 2 THEN done_time END", key="crashgate_json(data, '$.key')"))
    library_files = (litequeue.__file__,)
    session_type = LitequeueSession

    def create_schema(self, conn: sqlite3.Connection) -> None:
        LiteQueue(conn), LiteQueue(conn, queue_name="outbox")

    def open(self, db: str, world: Any, *, worker_id: str, clock: Any, rng: Any) -> LitequeueSession:
        return LitequeueSession(db, world, worker_id)


adapter = LitequeueAdapter
