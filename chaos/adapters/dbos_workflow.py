"""The reference pipeline (fetch -> extract -> verify -> deliver) as a DBOS Transact workflow of four
steps, as a team would write it: each step a ``@DBOS.step()`` that calls the world (the document
source, the paid model, the receiver), the workflow enqueued on a DBOS queue by the submitter and
run by whichever worker's DBOS dequeues it. The adapter (:mod:`chaos.adapters.dbos`) only opens DBOS
on the scenario's database and says how its rows are read.

A step retries what can differ next time (the world's timeouts and connection errors, raised as
Python's errors) with DBOS's own step retries; anything else it meets is returned as a refusal, and
the workflow then fails (DBOS's ERROR status), where a person looks.

>>> STEPS
('fetch', 'extract', 'verify', 'deliver')
"""

from __future__ import annotations

import json
from typing import Any

from dbos import DBOS

from chaos.adapters.queue_pipeline import DELIVERY, RETRYABLE, STEP_CALLS, STEPS, Call

__all__ = ["STEPS", "QUEUE", "WORKFLOW", "launch", "pipeline", "world"]

QUEUE = "pipeline"
WORKFLOW = "pipeline"
RETRY = dict(retries_allowed=True, max_attempts=3, interval_seconds=0.05, backoff_rate=1.0)
world: dict[str, Any] = {}  # this process's world and worker id (set when its DBOS opens)
_launched: list[str] = []  # the database this process's DBOS runs on (a process has one DBOS)


def launch(db: str) -> None:
    """Launch this process's DBOS on the SQLite file ``db`` with its default executor id, as an application does
    (once a process: its recovery of the executor's pending workflows starts then), listening to the queue."""
    if not _launched:
        DBOS(config={"name": "crashgate", "system_database_url": f"sqlite:///{db}", "log_level": "ERROR"})
        DBOS.launch()
        DBOS.register_queue(QUEUE, polling_interval_sec=0.05)
        _launched.append(db)


def _run(step: str, job_id: str, payload: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    call = Call(job_id, step, world["worker_id"])
    try:
        output = STEP_CALLS[step](world["world"], call, payload, inputs)
    except RETRYABLE:
        raise  # DBOS retries the step
    except Exception as exc:  # nothing differs next time: the workflow fails, for a person
        return {"refused": f"{type(exc).__name__}: {exc}"}
    return {"output": output}  # paid for; DBOS records it once the step returns


@DBOS.step(**RETRY)
def fetch(job_id: str, payload: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    return _run("fetch", job_id, payload, inputs)


@DBOS.step(**RETRY)
def extract(job_id: str, payload: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    return _run("extract", job_id, payload, inputs)


@DBOS.step(**RETRY)
def verify(job_id: str, payload: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    return _run("verify", job_id, payload, inputs)


@DBOS.step(**RETRY)
def deliver(job_id: str, payload: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """The effect leaves from the step itself, under the job's idempotency key (the receiver dedupes)."""
    body = {"job": job_id, "fields": inputs["extract"]["fields"]}
    world["world"].sender.send(f"{job_id}:{DELIVERY}", DELIVERY, body)
    return {"output": {"key": f"{job_id}:{DELIVERY}"}}


@DBOS.workflow(name=WORKFLOW)
def pipeline(job_id: str, payload: Any) -> str:
    inputs: dict[str, Any] = {}
    for step in (fetch, extract, verify, deliver):
        done = step(job_id, payload, inputs)
        if "refused" in done:
            raise ValueError(f"step {step.__name__} refused job {job_id!r}: {done['refused']}")
        inputs[step.__name__] = done["output"]
    return json.dumps(inputs["extract"]["fields"], sort_keys=True)
