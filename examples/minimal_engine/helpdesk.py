"""A help-desk workflow on tinyflow: triage a customer's ticket, then answer it.

``answer`` drafts the reply with the paid model and then sends it to the customer itself, through
the mail client it is given, under the idempotency key ``<ticket>:reply`` (the mail service
dedupes on it). tinyflow's outbox is not used: the reply leaves from the step, and a step that
fails or is retried sends it again under the same key.
"""

from __future__ import annotations

from typing import Any, Callable

from tinyflow import Call, Step

Model = Callable[[Call, str, str], tuple[str, float]]  # (call, task, prompt) -> (answer, cost in USD)
REPLY = "reply"


def build_steps(model: Model, mail: Any) -> list[Step]:
    def triage(call: Call, payload: dict[str, Any], memos: dict[str, Any]) -> tuple[Any, float]:
        label, cost = model(call, "triage", f"Label this support question: {payload['question']}")
        return {"label": label[:40]}, cost

    def answer(call: Call, payload: dict[str, Any], memos: dict[str, Any]) -> tuple[Any, float]:
        draft, cost = model(call, "answer", f"Answer {payload['customer']} ({memos['triage']['label']}): {payload['question']}")
        if draft.startswith("fail"):
            raise ValueError(f"the model refused to answer: {draft}")
        mail.send(f"{call.job_id}:{REPLY}", REPLY, {"to": payload["customer"], "body": draft})
        return {"sent_to": payload["customer"]}, cost

    return [
        Step("triage", "queued", "triaging", "triaged", triage),
        Step("answer", "triaged", "answering", "answered", answer),
    ]
