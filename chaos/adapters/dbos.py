"""DBOS Transact 3.4.0 on SQLite running the pipeline of :mod:`chaos.adapters.dbos_workflow`, read from DBOS's tables: a job
is its workflow_status row and a row per finished step (operation_outputs); its effect is due once verify is recorded, sent
once deliver is. Workers launch DBOS with its default executor id ("local"), as users do, so a second launch recovers a live
worker's workflow too (declared as the takeover it is): ``python -m chaos matrix --target chaos.adapters.dbos:adapter``"""

from __future__ import annotations

import contextlib
import inspect
import sys
from typing import Any

from dbos import DBOS, DBOSClient

from chaos.adapter import PYTHON_ERRORS
from chaos.adapters import dbos_workflow as workflow
from chaos.adapters.rows import AT_OPEN, JobRows, MemoRows, OutboxRows, RowsAdapter, RowSchema

__all__ = ["DbosAdapter", "DbosSession", "adapter"]
STEPS, ENDED = workflow.STEPS, ("SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")  # DBOS's ended statuses
ORDER = "CASE WHEN status IN ('ENQUEUED', 'PENDING') THEN 0 ELSE 100 END"  # an ended workflow's row comes after its steps'
PAID = "error IS NULL AND crashgate_unpickle(output, 'refused') IS NULL"  # a step that returned its output (not a refusal, not an error)
STEP_ORDER = f"CASE WHEN {PAID} THEN function_id ELSE -1 END"  # a failed step's row is never its job's current row: the workflow's is
SENT = "(SELECT d.completed_at_epoch_ms FROM operation_outputs d WHERE d.workflow_uuid = operation_outputs.workflow_uuid AND d.function_name = 'deliver' AND d.error IS NULL)"


class DbosSession:
    def __init__(self, db: str, world: Any, worker_id: str) -> None:
        self.db, self.worker_id = db, worker_id
        workflow.world.update(world=world, worker_id=worker_id)

    @property
    def writer(self) -> str:  # who writes now: DBOS's recovery at launch takes work over (at open), else the worker
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_name != "startup_recovery_thread":
            frame = frame.f_back
        return self.worker_id + (AT_OPEN if frame is not None else "")

    def submit(self, job_id: str, payload: Any) -> None:  # an id enqueued again is a no-op: DBOS keeps its first workflow
        (client := DBOSClient(system_database_url=f"sqlite:///{self.db}")).enqueue(
            {"queue_name": workflow.QUEUE, "workflow_name": workflow.WORKFLOW, "workflow_id": job_id}, job_id, payload)
        client.destroy()

    def run_once(self) -> str:  # launch DBOS (once a process), then wait for every workflow not yet ended
        workflow.launch(self.db)
        waiting = [w.workflow_id for w in DBOS.list_workflows(status=["ENQUEUED", "PENDING"], load_input=False, load_output=False)]
        for workflow_id in waiting:
            with contextlib.suppress(Exception):  # a workflow that failed (ERROR) says so in its status row
                DBOS.retrieve_workflow(workflow_id).get_result()
        return "ran" if waiting else "idle"

    def send_outbox(self) -> int: return 0  # the deliver step sends its effect itself
    def close(self) -> None: return None  # the process's DBOS ends with the process (another session may still run)


class DbosAdapter(RowsAdapter):
    name, lease_s, scenario_timeout_s = "dbos", 30.0, 60.0  # a scenario's bound: twice DBOS's SQLite busy timeout, waited out by a locked-out worker
    schema = RowSchema(  # no damage declared: DBOS unpickles a row only to resume from it
        JobRows(table="workflow_status", job_id="workflow_uuid", status="status", order=ORDER, working="PENDING",
                result="crashgate_unpickle(output, '')", takeover_at_open=True),
        memos=(MemoRows("operation_outputs", "workflow_uuid", "function_name", "crashgate_unpickle(output, 'output')", PAID),),
        outbox=OutboxRows("operation_outputs", id="rowid", job_id="workflow_uuid", kind="'delivery'", sent_at=SENT,
                          where=f"function_name = 'verify' AND {PAID}"),
        also=(JobRows(table="operation_outputs", job_id="workflow_uuid", status="'done'", step="function_name", order=STEP_ORDER),))
    working = ("PENDING", *(f"{s}:done" for s in STEPS[:-1]))
    table = {"ENQUEUED": ("PENDING", "CANCELLED"), **{s: () for s in ENDED}, f"{STEPS[-1]}:done": ENDED,
             **{w: (f"{s}:done", "ENQUEUED", *ENDED[1:]) for w, s in zip(working, STEPS)}}
    steps = [(s, w, f"{s}:done") for s, w in zip(STEPS, working)]
    final, parked, initial = {"SUCCESS": ("delivery",)}, ENDED[1:], ("ENQUEUED",)
    iteration, recovery, time_source, connections, create_with, engines_per_process = "one-call", "at-open", "wall", "pool", "path", "one"
    submit_conflict, fault_errors, session_type = "first-wins", PYTHON_ERRORS, DbosSession

    def create_schema(self, db: str) -> None: workflow.launch(db)  # DBOS makes its tables (and the queue's row) at launch
    def open(self, db: str, world: Any, *, worker_id: str, clock: Any, rng: Any) -> DbosSession: return DbosSession(db, world, worker_id)
    def targets(self) -> dict[str, Any]: return {"worker": workflow.pipeline, "sender": DbosSession.send_outbox}
    # The workflow's lines are the crash points: this module is glue, and its writer runs inside DBOS's own writes.
    def trace_paths(self) -> list[str]: return [inspect.getfile(workflow)]


adapter = DbosAdapter
