"""The reference workflow: fetch -> extract -> verify -> deliver, the shape of a document pipeline.

Its steps talk to two services passed in by the caller, never to globals: a document source for
``fetch`` and a paid model for ``extract`` and ``verify``. ``deliver`` emits one ``delivery``
effect through the outbox. The offline :class:`LocalModel` and :class:`GeneratedDocuments` make it
runnable anywhere; the chaos harness passes its own ledger-backed versions.

>>> from engine import FakeClock, SqliteStore, Worker
>>> wf = reference_workflow(LocalModel(), GeneratedDocuments())
>>> store = SqliteStore(":memory:")
>>> _ = store.submit("doc-1", {"source": "doc-1"}, now=0.0)
>>> Worker(store, wf, clock=FakeClock(0.0), threaded=False).run_once().outcome
'done'
>>> sorted(store.memos("doc-1"))
['deliver', 'extract', 'fetch', 'verify']
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Protocol

from ._errors import ParseFailed, ValidationFailed
from ._workflow import NeedsHuman, Step, StepOutput, Workflow

__all__ = [
    "reference_workflow",
    "ModelReply",
    "Model",
    "Documents",
    "LocalModel",
    "GeneratedDocuments",
    "REFERENCE_STATES",
]

DELIVERY = "delivery"
DOCUMENT_CHARS_MAX = 200_000

# The exact table the reference workflow must derive (DESIGN.md); tests compare against it.
REFERENCE_STATES: dict[str, tuple[str, ...]] = {
    "pending": ("fetching", "cancelled"),
    "fetching": ("fetched", "failed_fetch", "pending"),
    "fetched": ("extracting",),
    "extracting": ("extracted", "failed_extract", "fetched"),
    "extracted": ("verifying",),
    "verifying": ("verified", "needs_human", "extracted"),
    "verified": ("delivering",),
    "delivering": ("delivered", "failed_deliver", "verified"),
    "delivered": (),
    "needs_human": ("extracted", "cancelled"),
    "cancelled": (),
    "failed_fetch": ("pending",),
    "failed_extract": ("fetched",),
    "failed_deliver": ("verified",),
}


@dataclass(frozen=True)
class ModelReply:
    """What a paid model call answers: ``text``, the model's answer, and ``cost_usd``, its price
    in US dollars (a step returns it as ``StepOutput(..., cost_usd=reply.cost_usd)``, so that the
    engine records what each step cost)."""

    text: str
    cost_usd: float


class Model(Protocol):
    """A paid model call. ``ctx`` lets a long call heartbeat and lets a ledger name the caller."""

    def complete(self, ctx: Any, task: str, prompt: str) -> ModelReply: ...


class Documents(Protocol):
    def fetch(self, ctx: Any, source: str) -> str: ...


def reference_workflow(model: Model, documents: Documents) -> Workflow:
    """Build fetch -> extract -> verify -> deliver around the given services."""

    def fetch(ctx: Any) -> StepOutput:
        source = ctx.payload.get("source") if isinstance(ctx.payload, dict) else None
        if not isinstance(source, str) or not source:
            raise ValidationFailed("payload needs a non-empty string 'source'")
        text = documents.fetch(ctx, source)
        if len(text) > DOCUMENT_CHARS_MAX:
            raise ValidationFailed(f"document {source!r} has {len(text)} characters; the limit is {DOCUMENT_CHARS_MAX}")
        return StepOutput({"text": text, "chars": len(text)})

    def extract(ctx: Any) -> StepOutput:
        reply = model.complete(ctx, "extract", ctx.inputs["fetch"]["text"])
        try:
            fields = json.loads(reply.text)
        except ValueError as exc:
            raise ParseFailed(f"extract answer is not JSON: {reply.text[:60]!r}") from exc
        if not isinstance(fields, dict):
            raise ParseFailed(f"extract answer is not a JSON object: {reply.text[:60]!r}")
        return StepOutput({"fields": fields}, cost_usd=reply.cost_usd)

    def verify(ctx: Any) -> StepOutput | NeedsHuman:
        fields = ctx.inputs["extract"]["fields"]
        reply = model.complete(ctx, "verify", json.dumps(fields, sort_keys=True))
        if reply.text != "pass":
            return NeedsHuman(reply.text, cost_usd=reply.cost_usd)
        return StepOutput({"verdict": "pass"}, cost_usd=reply.cost_usd)

    def deliver(ctx: Any) -> StepOutput:
        delivery = {"job": ctx.job_id, "fields": ctx.inputs["extract"]["fields"]}
        return StepOutput({"key": f"{ctx.job_id}:{DELIVERY}"}, effects={DELIVERY: delivery})

    return Workflow(
        "reference",
        [
            Step("fetch", fetch, working="fetching", done="fetched", failed="failed_fetch"),
            Step("extract", extract, working="extracting", done="extracted", failed="failed_extract"),
            Step("verify", verify, working="verifying", done="verified", review=True),
            Step("deliver", deliver, working="delivering", done="delivered", failed="failed_deliver", effects=(DELIVERY,)),
        ],
    )


class LocalModel:
    """An offline, deterministic stand-in for a paid model (priced per 1,000 characters)."""

    def __init__(self, usd_per_1k_chars: float = 0.002) -> None:
        self.usd_per_1k_chars = usd_per_1k_chars

    def complete(self, ctx: Any, task: str, prompt: str) -> ModelReply:
        return ModelReply(local_answer(task, prompt), round(len(prompt) / 1000 * self.usd_per_1k_chars, 8))


def local_answer(task: str, prompt: str) -> str:
    """The deterministic answer of the offline model: used by :class:`LocalModel` and the harness."""
    if task == "extract":
        lines = [line for line in prompt.splitlines() if line.strip()]
        title = lines[0].strip()[:80] if lines else ""
        return json.dumps({"title": title, "words": len(prompt.split())}, sort_keys=True)
    if task == "verify":
        fields = json.loads(prompt)
        return "pass" if fields.get("title") else "fail: the document has no title"
    # Any other task (a user's own step): a deterministic answer derived from the prompt, so that
    # the same call always answers the same and a crash never changes what a step returns.
    digest = hashlib.sha256(f"{task}\n{prompt}".encode()).hexdigest()
    return json.dumps({"task": task, "answer": digest[:16], "chars": len(prompt)}, sort_keys=True)


class GeneratedDocuments:
    """A document source that makes a short deterministic document from any source name."""

    def fetch(self, ctx: Any, source: str) -> str:
        return generated_document(source)


def generated_document(source: str) -> str:
    digest = hashlib.sha256(source.encode()).hexdigest()
    words = " ".join(digest[i : i + 5] for i in range(0, 40, 5))
    return f"Report {source}\n{words}\n"
