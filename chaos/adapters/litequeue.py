"""litequeue 0.9 running the reference pipeline (:mod:`chaos.adapters.queue_pipeline`), read from its own rows.

litequeue keeps one row per message (``data`` as given, an integer ``status``): the job's id and
step are read inside the JSON message, and nothing else is kept. A consumer that dies holding a
message leaves it locked: litequeue has no lease and never hands it out again.

    python -m chaos matrix --target chaos.adapters.litequeue:adapter --faults crash
"""

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


class LitequeueSession:
    def __init__(self, db: str, world: Any, worker_id: str) -> None:
        self.conn = sqlite3.connect(db, timeout=5, isolation_level=None, check_same_thread=False)
        self.queue, self.outbox = LiteQueue(self.conn), LiteQueue(self.conn, queue_name="outbox")
        self.world, self.worker_id = world, worker_id

    def submit(self, job_id: str, payload: Any) -> None:
        if self.conn.execute(SELECT_SUBMITTED, (job_id,)).fetchone() is None:  # an id already queued is a no-op
            self.queue.put(json.dumps(pipeline.first_message(job_id, payload), sort_keys=True))

    def run_once(self) -> str:
        try:
            taken = self.queue.pop()
            if taken is None:
                return "idle"
            message = json.loads(taken.data)
            outcome = pipeline.run_step(self.world, self.worker_id, message)
            if outcome.what == "next":
                (self.outbox if message["step"] == pipeline.STEPS[-1] else self.queue).put(json.dumps(outcome.message, sort_keys=True))
                self.queue.done(taken.message_id)
            else:
                (self.queue.retry if outcome.what == "retry" else self.queue.mark_failed)(taken.message_id)
            return outcome.what
        except sqlite3.OperationalError as exc:  # another process holds the write lock: try later
            if "locked" in str(exc) or "busy" in str(exc):
                return "busy"
            raise

    def send_outbox(self) -> int:
        sent = 0
        while (taken := self.outbox.pop()) is not None:
            try:
                pipeline.send_effect(self.world, json.loads(taken.data))
            except pipeline.RETRYABLE:
                self.outbox.retry(taken.message_id)
                break
            self.outbox.done(taken.message_id)
            sent += 1
        return sent

    def claim_only(self) -> None: self.queue.pop()
    def connection(self) -> sqlite3.Connection: return self.conn
    def set_busy_timeout(self, seconds: float) -> None: self.conn.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")
    def close(self) -> None: self.conn.close()


class LitequeueAdapter(RowsAdapter):
    name = "litequeue"
    lease_s = 30.0
    schema = RowSchema(
        JobRows(table="Queue", job_id=JOB, status="status", statuses={0: "ready", 1: "working", 2: "done", 3: "failed"},
                step="crashgate_json(data, '$.step')", payload="crashgate_json(data, '$.payload')"),
        memos=(MemoRows("Queue", **AFTER), MemoRows("outbox", **AFTER)),
        outbox=OutboxRows("outbox", id="rowid", job_id=JOB, kind="crashgate_json(data, '$.kind')",
                          sent_at="CASE WHEN status = 2 THEN done_time END", key="crashgate_json(data, '$.key')"),
    )  # damage: none declared (litequeue reads no message it could find damaged: it hands data out as stored)
    table = pipeline.states()
    steps = [(step, f"{step}:working", f"{step}:done") for step in pipeline.STEPS]
    final = {"deliver:done": (pipeline.DELIVERY,)}
    parked = tuple(f"{step}:failed" for step in pipeline.STEPS)
    initial = ("fetch:ready",)
    iteration = "until-idle"  # one message, one step, per run_once
    submit_conflict = "first-wins"
    fault_errors = PYTHON_ERRORS
    session_type = LitequeueSession

    def create_schema(self, conn: sqlite3.Connection) -> None:
        LiteQueue(conn), LiteQueue(conn, queue_name="outbox")

    def targets(self) -> dict[str, Any]: return {"worker": LitequeueSession.run_once, "sender": LitequeueSession.send_outbox}
    def trace_paths(self) -> list[str]: return [__file__, pipeline.__file__]

    def open(self, db: str, world: Any, *, worker_id: str, clock: Any, rng: Any) -> LitequeueSession:
        return LitequeueSession(db, world, worker_id)


adapter = LitequeueAdapter
