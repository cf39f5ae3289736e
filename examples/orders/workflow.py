"""The orders workflow: fetch -> charge -> receipt.

``fetch`` reads the order, ``charge`` asks the payment provider (the paid call) and ``receipt``
returns the receipt email as an effect: the engine commits it with the step, and the outbox
sender delivers it under the key ``<order id>:receipt``, which the mail service dedupes on.
"""

from __future__ import annotations

from typing import Any

from engine import Step, StepOutput, ValidationFailed, Workflow

SHOP = "receipts@shop.example"


def build_workflow(payments: Any, orders: Any) -> Workflow:
    """``payments.complete(ctx, task, prompt)`` is the paid call; ``orders.fetch(ctx, source)``
    reads an order."""

    def fetch(ctx: Any) -> StepOutput:
        source = ctx.payload.get("order") if isinstance(ctx.payload, dict) else None
        if not isinstance(source, str) or not source:
            raise ValidationFailed("an order job needs a non-empty string 'order'")
        return StepOutput({"order": orders.fetch(ctx, source)[:40]})

    def charge(ctx: Any) -> StepOutput:
        reply = payments.complete(ctx, "charge", ctx.inputs["fetch"]["order"])
        return StepOutput({"charged": len(reply.text)}, cost_usd=reply.cost_usd)

    def receipt(ctx: Any) -> StepOutput:
        email = {"to": f"{ctx.job_id}@customers.example", "from": SHOP, "amount": ctx.inputs["charge"]["charged"]}
        return StepOutput({"sent_to": email["to"]}, effects={"receipt": email})

    return Workflow("orders", [Step("fetch", fetch), Step("charge", charge), Step("receipt", receipt, effects=("receipt",))])
