"""litequeue 0.9 running the reference pipeline (:mod:`chaos.adapters.queue_pipeline`), read from its own rows: one
row per message, a job's id and step inside its JSON. A consumer that dies holding a message leaves it locked for
good (litequeue has no lease): ``python -m chaos matrix --target chaos.adapters.litequeue:adapter --faults crash``."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from litequeue import LiteQueue

from chaos.adapter import PYTHON_ERRORS
from chaos.adapters import queue_pipeline as pipeline
from chaos.adapters.rows import JobRows, MemoRows, OutboxRows, RowSchema, RowsAdapter

JOB = "crashgate_json(data, '$.job_id')"
AFTER = dict(job_id=JOB, step="crashgate_json(data, '$.after')", output="crashgate_json(data, '$.output')",
             where="crashgate_json(data, '$.after') IS NOT NULL")
SELECT_SUBMITTED = "SELECT 1 FROM Queue WHERE json_extract(data, '$.job_id') = ? LIMIT 1"


def verbs(queue: LiteQueue, outbox: LiteQueue) -> pipeline.Verbs:
    def take() -> Any: return None if (m := queue.pop()) is None else (m.message_id, json.loads(m.data))
    def put(into: LiteQueue) -> Any: return lambda message: into.put(json.dumps(message, sort_keys=True))
    return pipeline.Verbs(take, put(queue), put(outbox), queue.done, queue.retry, queue.mark_failed)


class LitequeueSession:
    def __init__(self, db: str, world: Any, worker_id: str) -> None:
        self.conn = sqlite3.connect(db, timeout=5, isolation_level=None, check_same_thread=False)
        queue, outbox = LiteQueue(self.conn), LiteQueue(self.conn, queue_name="outbox")
        self.queue, self.outbox, self.world, self.worker_id = verbs(queue, outbox), verbs(outbox, outbox), world, worker_id

    def submit(self, job_id: str, payload: Any) -> None:
        if self.conn.execute(SELECT_SUBMITTED, (job_id,)).fetchone() is None:  # an id already queued is a no-op
            self.queue.put(pipeline.first_message(job_id, payload))

    def run_once(self) -> str:
        try:
            return pipeline.consume(self.world, self.worker_id, self.queue)
        except sqlite3.OperationalError as exc:  # another process holds the write lock: try later
            if pipeline.busy(exc):
                return "busy"
            raise

    def send_outbox(self) -> int: return pipeline.drain_outbox(self.world, self.outbox)
    def claim_only(self) -> None: self.queue.take()
    def connection(self) -> sqlite3.Connection: return self.conn
    def set_busy_timeout(self, seconds: float) -> None: self.conn.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")
    def close(self) -> None: self.conn.close()


class LitequeueAdapter(RowsAdapter):
    name, lease_s = "litequeue", 30.0
    schema = RowSchema(  # no damage declared: litequeue hands a message out as stored, reading nothing in it
        JobRows(table="Queue", job_id=JOB, status="status", statuses={0: "ready", 1: "working", 2: "done", 3: "failed"},
                step="crashgate_json(data, '$.step')", payload="crashgate_json(data, '$.payload')"),
        memos=(MemoRows("Queue", **AFTER), MemoRows("outbox", **AFTER)),
        outbox=OutboxRows("outbox", id="rowid", job_id=JOB, kind="crashgate_json(data, '$.kind')",
                          sent_at="CASE WHEN status = 2 THEN done_time END", key="crashgate_json(data, '$.key')"))
    table = pipeline.states()
    steps = [(step, f"{step}:working", f"{step}:done") for step in pipeline.STEPS]
    final = {"deliver:done": (pipeline.DELIVERY,)}
    parked = tuple(f"{step}:failed" for step in pipeline.STEPS)
    initial = ("fetch:ready",)
    iteration = "until-idle"  # one message, one step, per run_once
    submit_conflict = "first-wins"
    fault_errors = PYTHON_ERRORS
    session_type = LitequeueSession

    def create_schema(self, conn: sqlite3.Connection) -> None: LiteQueue(conn), LiteQueue(conn, queue_name="outbox")
    def targets(self) -> dict[str, Any]: return {"worker": LitequeueSession.run_once, "sender": LitequeueSession.send_outbox}
    def trace_paths(self) -> list[str]: return [__file__, pipeline.__file__]

    def open(self, db: str, world: Any, *, worker_id: str, clock: Any, rng: Any) -> LitequeueSession:
        return LitequeueSession(db, world, worker_id)


adapter = LitequeueAdapter
