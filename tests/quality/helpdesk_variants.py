"""The help-desk workflow of ``examples/minimal_engine`` (whose ``answer`` step sends its reply
itself) with planted bugs, each declared as the example declares it (``sends_from_steps``): the
declaration must not hide them. Imported with the example's folder on the path."""

from __future__ import annotations

from typing import Any

import helpdesk
import tinyflow
from helpdesk import REPLY
from helpdesk_crash import HelpdeskAdapter, HelpdeskSession
from tinyflow import Call, Step


def _answer_twice_paid(model: Any, mail: Any) -> Any:
    def answer(call: Call, payload: dict[str, Any], memos: dict[str, Any]) -> tuple[Any, float]:
        draft, cost = model(call, "answer", f"Answer {payload['customer']}: {payload['question']}")
        polished, more = model(call, "answer", f"Make this friendlier: {draft}")  # BUG: a second paid call, every run
        mail.send(f"{call.job_id}:{REPLY}", REPLY, {"to": payload["customer"], "body": polished})
        return {"sent_to": payload["customer"]}, cost + more

    return answer


def _answer_sent_twice(model: Any, mail: Any) -> Any:
    def answer(call: Call, payload: dict[str, Any], memos: dict[str, Any]) -> tuple[Any, float]:
        draft, cost = model(call, "answer", f"Answer {payload['customer']}: {payload['question']}")
        for _ in range(2):  # BUG: the reply goes out twice
            mail.send(f"{call.job_id}:{REPLY}", REPLY, {"to": payload["customer"], "body": draft})
        return {"sent_to": payload["customer"]}, cost

    return answer


class _PlantedSession(HelpdeskSession):
    answer: Any = None

    def __init__(self, db: str, world: Any, worker_id: str, clock: Any, rng: Any, lease_s: float) -> None:
        super().__init__(db, world, worker_id, clock, rng, lease_s)

        def model(call: tinyflow.Call, task: str, prompt: str) -> tuple[str, float]:
            reply = world.model.complete(call, task, prompt)
            return reply.text, reply.cost_usd

        triage = helpdesk.build_steps(model, world.sender)[0]
        steps = [triage, Step("answer", "triaged", "answering", "answered", type(self).answer(model, world.sender))]
        self.engine = tinyflow.Engine(self.conn, steps, worker_id=worker_id, clock=clock.now, lease_s=lease_s, rng=rng)


class TwicePaidSession(_PlantedSession):
    answer = staticmethod(_answer_twice_paid)


class SentTwiceSession(_PlantedSession):
    answer = staticmethod(_answer_sent_twice)


class TwicePaid(HelpdeskAdapter):
    """``answer`` asks the model twice on every run, fault or not."""

    name, session_type = "helpdesk-twice-paid", TwicePaidSession

    def open(self, db: str, world: Any, *, worker_id: str, clock: Any, rng: Any) -> Any:
        return TwicePaidSession(db, world, worker_id, clock, rng, self.lease_s)


class SentTwice(HelpdeskAdapter):
    """``answer`` sends its reply twice, to a mail service that applies every delivery (no dedupe)."""

    name, session_type, receiver = "helpdesk-sent-twice", SentTwiceSession, "strict"

    def open(self, db: str, world: Any, *, worker_id: str, clock: Any, rng: Any) -> Any:
        return SentTwiceSession(db, world, worker_id, clock, rng, self.lease_s)
