"""Versions of the orders workflow that a real team writes, each crash-unsafe in one way.

- ``build_cached``: ``fetch`` keeps the order in a module-level dict and ``charge`` reads it from
  there. In one process it works; a worker that restarts after ``fetch`` never had the dict.
- ``build_own_client``: ``receipt`` sends the email through the team's own client (here a file
  append, as a local mail spool would) instead of returning it as an effect: every re-run of the
  step sends it again, and nothing commits it with the step.
"""

from __future__ import annotations

import json
import os
from typing import Any

from engine import Step, StepOutput, Workflow

from .workflow import SHOP, build_workflow

_ORDERS: dict[str, str] = {}  # UNSAFE: process memory, gone when the worker restarts
SPOOL = os.environ.get("ORDERS_MAIL_SPOOL", os.path.join(os.path.dirname(os.path.abspath(__file__)), "sent_emails.txt"))


def build_cached(payments: Any, orders: Any) -> Any:
    safe = build_workflow(payments, orders)

    def fetch(ctx: Any) -> StepOutput:
        text = orders.fetch(ctx, ctx.payload["order"])[:40]
        _ORDERS[ctx.job_id] = text  # UNSAFE: the next step reads it from here
        return StepOutput({"fetched": True})

    def charge(ctx: Any) -> StepOutput:
        order = _ORDERS[ctx.job_id]  # a KeyError in a worker that did not run fetch
        reply = payments.complete(ctx, "charge", order)
        return StepOutput({"charged": len(reply.text)}, cost_usd=reply.cost_usd)

    return type(safe)("orders", [Step("fetch", fetch), Step("charge", charge), safe.steps[2]])


def build_own_client(payments: Any, orders: Any) -> Any:
    safe = build_workflow(payments, orders)

    def receipt(ctx: Any) -> StepOutput:
        email = {"to": f"{ctx.job_id}@customers.example", "from": SHOP, "amount": ctx.inputs["charge"]["charged"]}
        with open(SPOOL, "a", encoding="utf-8") as spool:  # UNSAFE: sent before the step commits
            spool.write(json.dumps(email) + "\n")
        return StepOutput({"sent_to": email["to"]})

    return type(safe)("orders", [*safe.steps[:2], Step("receipt", receipt)])
