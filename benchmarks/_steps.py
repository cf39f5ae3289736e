"""The reference workflow's four steps as plain functions, for the peers to run.

Each does what the matching :func:`engine.reference_workflow` step does on the offline services
(:class:`engine.GeneratedDocuments`, :class:`engine.LocalModel`), so every engine in the table
runs the same step work and the differences are the engines' own.

>>> out = deliver("doc-1", verify(extract(fetch("doc-1"))))
>>> out["key"], out["delivery"]["fields"]["words"]
('doc-1:delivery', 10)
"""

from __future__ import annotations

import json
from typing import Any

from engine import GeneratedDocuments, LocalModel

__all__ = ["fetch", "extract", "verify", "deliver", "one_step"]

_DOCUMENTS = GeneratedDocuments()
_MODEL = LocalModel()


def fetch(source: str) -> dict[str, Any]:
    text = _DOCUMENTS.fetch(None, source)
    return {"text": text, "chars": len(text)}


def extract(fetched: dict[str, Any]) -> dict[str, Any]:
    reply = _MODEL.complete(None, "extract", fetched["text"])
    return {"fields": json.loads(reply.text), "cost_usd": reply.cost_usd}


def verify(extracted: dict[str, Any]) -> dict[str, Any]:
    reply = _MODEL.complete(None, "verify", json.dumps(extracted["fields"], sort_keys=True))
    if reply.text != "pass":
        raise ValueError(f"verification failed: {reply.text}")
    return {"fields": extracted["fields"], "verdict": "pass"}


def deliver(job_id: str, verified: dict[str, Any]) -> dict[str, Any]:
    return {"key": f"{job_id}:delivery", "delivery": {"job": job_id, "fields": verified["fields"]}}


def one_step(job_id: str) -> dict[str, Any]:
    """All four steps in one call: the work of a 1-step task on a plain queue."""
    return deliver(job_id, verify(extract(fetch(job_id))))
