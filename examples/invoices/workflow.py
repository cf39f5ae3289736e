"""The invoice workflow: read -> extract -> notify.

Each step talks to a service passed in, never to a global, so production passes real clients and
the crash gate passes its recording world. ``notify`` does not send the email itself: it returns
the email as an effect, which the engine commits in the same transaction as the step's result,
and the outbox sender delivers afterwards with the key ``<job id>:email``.
"""

from __future__ import annotations

import json
from typing import Any

from engine import ParseFailed, Step, StepOutput, ValidationFailed, Workflow

ACCOUNTS = "accounts@example.com"


def build_workflow(model: Any, documents: Any, email: Any = None) -> Workflow:
    """``model.complete(ctx, task, prompt)`` is the paid call; ``documents.fetch(ctx, source)``
    reads an invoice. ``email`` is unused here: the outbox sender delivers the emails."""

    def read(ctx: Any) -> StepOutput:
        source = ctx.payload.get("source") if isinstance(ctx.payload, dict) else None
        if not isinstance(source, str) or not source:
            raise ValidationFailed("an invoice job needs a non-empty string 'source'")
        return StepOutput({"text": documents.fetch(ctx, source)})

    def extract(ctx: Any) -> StepOutput:
        reply = model.complete(ctx, "extract", ctx.inputs["read"]["text"])
        try:
            fields = json.loads(reply.text)
        except ValueError as exc:
            raise ParseFailed(f"the model's answer is not JSON: {reply.text[:60]!r}") from exc
        return StepOutput({"title": fields.get("title", ""), "lines": fields.get("words", 0)}, cost_usd=reply.cost_usd)

    def notify(ctx: Any) -> StepOutput:
        invoice = ctx.inputs["extract"]
        message = {"to": ACCOUNTS, "subject": f"Invoice {ctx.job_id}: {invoice['title']}", "lines": invoice["lines"]}
        return StepOutput({"notified": ACCOUNTS}, effects={"email": message})

    return Workflow(
        "invoices",
        [
            Step("read", read),
            Step("extract", extract),
            Step("notify", notify, effects=("email",)),
        ],
    )
