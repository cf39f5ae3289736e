"""The first version of ``notify``, kept to show what the crash gate says about it.

It sends the email from inside the step. The send happens before the engine commits the step, so
a worker that dies after the send and before the commit re-runs the step and emails again; and an
email goes out for a result the engine may never record. The gate reports it as
``outbox-at-least-once``: an effect arrived at the receiver without a committed outbox row.
The fix is in ``workflow.py``: return the email as an effect and let the outbox deliver it.
"""

from __future__ import annotations

from typing import Any

from engine import Step, StepOutput, Workflow

from .workflow import ACCOUNTS, build_workflow


def build_unsafe_workflow(model: Any, documents: Any, email: Any) -> Workflow:
    safe = build_workflow(model, documents)

    def notify(ctx: Any) -> StepOutput:
        invoice = ctx.inputs["extract"]
        message = {"to": ACCOUNTS, "subject": f"Invoice {ctx.job_id}: {invoice['title']}", "lines": invoice["lines"]}
        email.send(f"{ctx.job_id}:email", "email", message)  # UNSAFE: sent before the step commits
        return StepOutput({"notified": ACCOUNTS})

    return Workflow("invoices", [*safe.steps[:-1], Step("notify", notify)])
