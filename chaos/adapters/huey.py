"""huey 3.5.4's ``SqliteHuey`` running the reference pipeline (:mod:`chaos.adapters.queue_pipeline`) as a huey pipeline
(fetch, extract, verify, deliver, send, chained with ``then``), read from its own rows: a pickled message per task, deleted
at its dequeue, and a pickled result. A task killed after its dequeue is lost; so is the rest of a pipeline killed between
storing a result and enqueuing the next task: ``python -m chaos matrix --target chaos.adapters.huey:adapter --family clean --family resume --faults crash``."""

import logging
import sqlite3
from typing import Any

from huey import SqliteHuey, api as huey_api, storage as huey_storage
from huey.exceptions import CancelExecution

from chaos.adapters import queue_pipeline as pipeline
from chaos.adapters.rows import JobRows, MemoRows, OutboxRows, RowSchema

__all__ = ["HueyAdapter", "HueySession", "adapter"]

QUEUE, SEND = "pipeline", "send"  # the huey's name (its rows' queue); the last task, which sends the effect
ARG = "crashgate_json(crashgate_unpickle(data, 'kwargs'), '$.{}')"  # a task's message: its keyword arguments
VALUE = "crashgate_unpickle(value, '{}')"  # a stored result: the message its task returned
WHERE = f"queue = '{QUEUE}' AND {VALUE} IS NOT NULL"  # a stored result that names its 'after' or 'kind'
# A dequeued message is taken: done once its result is stored, failed once its last Error is (an Error of an attempt
# huey retries has retries left), else lost if its consumer died.
DELETED = f"COALESCE((SELECT CASE WHEN {VALUE.format('after')} IS NOT NULL THEN 2 WHEN crashgate_json({VALUE.format('metadata')}, " \
          f"'$.retries') = 0 THEN 3 END FROM kv WHERE queue = '{QUEUE}' AND key = crashgate_unpickle(data, 'id')), 1)"


class HueySession(pipeline.QueueSession):
    """A huey consumer's loop: dequeue a task, execute it (huey stores its result, then enqueues the next)."""

    def __init__(self, db: str, world: Any, worker_id: str) -> None:  # the tables are create_schema's: made at each opening, they need the write lock
        self.huey, self.world, self.worker_id = SqliteHuey(QUEUE, filename=db, timeout=5, create_tables=False), world, worker_id
        self.tasks, self.conn = workflow(self), self.huey.storage.conn

    def submit(self, job_id: str, payload: Any) -> None:
        if self.huey.put_if_empty(f"submitted:{job_id}", job_id):  # huey's own way to run an id once
            self.huey.enqueue(chain(self.tasks, job_id, payload))

    def run_once(self) -> str:
        try:  # each error logged, and the loop goes on, as in huey's own (huey.consumer.Worker.loop)
            task = self.huey.dequeue()  # huey deletes the message here, before its task runs
        except Exception:  # a database locked or failing: no progress, the next iteration tries again
            logging.getLogger("huey.consumer").exception("Error reading from queue")
            return "busy"
        if task is None:
            return "idle"
        try:
            self.huey.execute(task)
        except Exception:
            logging.getLogger("huey.consumer").exception("Unhandled error during execution of task %s.", task.id)
        return "ran"

    def send_outbox(self) -> int:  # the pipeline's last task sends the effect, in the consumer's loop
        return 0

    def claim_only(self) -> None:
        self.huey.dequeue()


class HueyAdapter(pipeline.QueuePipelineAdapter):
    name, lease_s, session_type, library_files = "huey", 30.0, HueySession, (huey_api.__file__, huey_storage.__file__)
    schema = RowSchema(  # no damage declared: huey unpickles a message only to run it
        JobRows(table="task", job_id=f"CASE WHEN {ARG.format('step')} IS NOT NULL THEN {ARG.format('job_id')} END",
                status="0", statuses={0: "ready", 1: "working", 2: "done", 3: "failed"}, step=ARG.format("step"),
                order=f"instr('{' '.join(pipeline.STEPS)}', {ARG.format('step')})", payload=ARG.format("payload"), deleted=DELETED),
        memos=(MemoRows("kv", VALUE.format("job_id"), VALUE.format("after"), VALUE.format("output"), WHERE.format("after")),),
        outbox=OutboxRows("kv", "rowid", VALUE.format("job_id"), VALUE.format("kind"), key=VALUE.format("key"), where=WHERE.format("kind"),
                          sent_at="(SELECT 1 FROM kv AS s WHERE crashgate_unpickle(s.value, 'sent') = crashgate_unpickle(kv.value, 'key'))"))

    def create_schema(self, conn: sqlite3.Connection) -> None:
        SqliteHuey(QUEUE, filename=conn.execute("PRAGMA database_list").fetchone()[2]).storage.close()

    def open(self, db: str, world: Any, *, worker_id: str, clock: Any, rng: Any) -> HueySession:
        return HueySession(db, world, worker_id)

    def targets(self) -> dict[str, Any]:
        return {"worker": HueySession.run_once, "sender": HueySession.send_outbox}


adapter = HueyAdapter


# -- the workflow: the pipeline's steps as huey tasks, chained as a huey pipeline -----------------------------------
ATTEMPTS_MAX = 5  # a task's runs: huey's retries, one fewer (it runs a task that raised again at once: no backoff)

def workflow(session: HueySession) -> dict[str, Any]:
    """The pipeline's tasks on ``session``'s huey: one per step, then the one that sends the effect."""
    def run(**message: Any) -> Any:  # huey passes a returned dict to the next task as its keywords
        outcome = pipeline.run_step(session.world, session.worker_id, message)
        if outcome.what == "retry":  # huey runs a task that raised again, ATTEMPTS_MAX - 1 times, then stores an Error
            raise RuntimeError(outcome.error)
        if outcome.what == "failed":  # poison: an Error for the task and the rest of its pipeline, at once
            raise CancelExecution(retry=False)
        return outcome.message

    def send(**effect: Any) -> dict[str, Any]:
        try:
            pipeline.send_effect(session.world, effect)
        except pipeline.RETRYABLE as exc:  # the receiver is down: huey runs the task again
            raise RuntimeError(f"{type(exc).__name__}: {exc}")
        return {"job_id": effect["job_id"], "sent": effect["key"]}

    task = session.huey.task
    return {**{step: task(ATTEMPTS_MAX - 1, name=step)(run) for step in pipeline.STEPS}, SEND: task(ATTEMPTS_MAX - 1, name=SEND)(send)}


def chain(tasks: dict[str, Any], job_id: str, payload: Any) -> Any:
    """A job's huey pipeline: its first step's task, each next one chained with ``then``."""
    first = tasks["fetch"].s(**pipeline.first_message(job_id, payload))
    for step in (*pipeline.STEPS[1:], SEND):
        first.then(tasks[step])
    return first
