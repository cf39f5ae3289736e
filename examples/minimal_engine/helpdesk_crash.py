"""How crashgate drives the help-desk workflow on tinyflow (``helpdesk.py``).

Its ``answer`` step sends the customer's reply itself, so the adapter says so
(``sends_from_steps``): a send that fails inside that step is a fault of that step, which
explains its retry and the paid call the retry makes. The reply is due from the moment the step
starts (tinyflow commits the move into ``answering`` first) and sent once the step's memo row is
committed: that is the outbox the snapshot shows, since no outbox row is written for it.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import helpdesk
import tinyflow
from chaos.adapter import OutboxView, Snapshot
from crash import TinyflowAdapter, TinyflowSession

# The reply of a ticket: due while its answer step runs, sent once that step's memo row is committed.
SELECT_REPLIES = ("SELECT job.rowid, job.id, step_result.at FROM job LEFT JOIN step_result "
                  "ON step_result.job_id = job.id AND step_result.step = 'answer' "
                  "WHERE job.state = 'answering' OR step_result.at IS NOT NULL")


class HelpdeskSession(TinyflowSession):
    def __init__(self, db: str, world: Any, worker_id: str, clock: Any, rng: Any, lease_s: float) -> None:
        super().__init__(db, world, worker_id, clock, rng, lease_s)

        def model(call: tinyflow.Call, task: str, prompt: str) -> tuple[str, float]:
            reply = world.model.complete(call, task, prompt)
            return reply.text, reply.cost_usd

        steps = helpdesk.build_steps(model, world.sender)  # the world's receiver stands for the mail service
        self.engine = tinyflow.Engine(self.conn, steps, worker_id=worker_id, clock=clock.now, lease_s=lease_s, rng=rng)


class HelpdeskAdapter(TinyflowAdapter):
    name = "helpdesk"
    table = tinyflow.table(helpdesk.build_steps(model=None, mail=None))  # type: ignore[arg-type]
    steps = [("triage", "triaging", "triaged"), ("answer", "answering", "answered")]
    final = {"published": (helpdesk.REPLY,)}
    session_type = HelpdeskSession
    sends_from_steps = {"answer": (helpdesk.REPLY,)}  # the answer step sends the reply itself

    def tasks(self) -> dict[str, str]: return {"extract": "triage", "verify": "answer"}
    def payload(self, job_id: str) -> dict[str, str]: return {"customer": f"{job_id}@example.com", "question": "Where is my parcel?"}
    def job_ids(self, n: int) -> list[str]: return [f"ticket-{500 + i}" for i in range(1, n + 1)]
    def trace_paths(self) -> list[str]: return [tinyflow.__file__, helpdesk.__file__]

    def open(self, db: str, world: Any, *, worker_id: str, clock: Any, rng: Any) -> HelpdeskSession:
        return HelpdeskSession(db, world, worker_id, clock, rng, self.lease_s)

    def inspect(self, db_path: str) -> Snapshot:
        snapshot = super().inspect(db_path)
        conn = sqlite3.connect(db_path, timeout=30)
        try:
            rows = conn.execute(SELECT_REPLIES).fetchall()
        finally:
            conn.close()
        snapshot.outbox += [OutboxView(rowid, job_id, helpdesk.REPLY, at) for rowid, job_id, at in rows]
        return snapshot


adapter = HelpdeskAdapter


class UndeclaredHelpdeskAdapter(HelpdeskAdapter):
    """The same adapter without the declaration: a send fault in ``answer`` is then nobody's fault."""

    sends_from_steps = None


undeclared = UndeclaredHelpdeskAdapter
