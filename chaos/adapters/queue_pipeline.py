"""The reference pipeline (fetch -> extract -> verify -> deliver) as messages on a queue library.

A queue has no workflow engine: a pipeline on it is one message per step. A consumer takes a
message, runs its step against the world (the document source, the paid model), puts the next
step's message, carrying the step's output, and only then marks its own message done (a crash
between the two leaves a message the library may hand out again, never a job without its next
step). The last step puts its effect on a second queue, the outbox, whose consumer sends it to the
world's receiver under the key ``<job>:delivery`` and then marks it done. Shared by the shipped
queue adapters (:mod:`chaos.adapters.litequeue`, :mod:`chaos.adapters.persistqueue`), which only
say how their library takes, puts and marks a message.

A message carries ``job_id``, ``step``, the job's ``payload``, the outputs of the steps before it
(``inputs``), and the step just finished with its output (``after``, ``output``): the memo read
from the library's rows.

>>> message = first_message("doc-1", {"source": "doc-1"})
>>> message["step"], message["inputs"]
('fetch', {})
"""

from __future__ import annotations

import inspect
import json
import sqlite3
from dataclasses import dataclass
from typing import Any, Callable

from chaos.adapter import PYTHON_ERRORS
from chaos.adapters.rows import RowsAdapter

__all__ = ["STEPS", "DELIVERY", "Call", "Outcome", "Verbs", "QueueSession", "QueuePipelineAdapter", "first_message", "consume",
           "drain_outbox", "run_step", "send_effect", "states", "RETRYABLE"]

STEPS = ("fetch", "extract", "verify", "deliver")
DELIVERY = "delivery"
STATUSES = ("ready", "working", "done", "failed")  # each message's status, as the adapters name the library's
DOCUMENT_CHARS_MAX = 200_000  # the reference fetch step's limit
RETRYABLE = (TimeoutError, ConnectionError)  # the world's faults as Python's errors (chaos.adapter.PYTHON_ERRORS)


@dataclass(frozen=True)
class Call:
    """What a paid call is told about its caller (the world's ledger names it)."""

    job_id: str
    step: str
    worker_id: str


@dataclass(frozen=True)
class Outcome:
    """What to do with the message just run: ``"next"`` (put ``message``, then mark done),
    ``"retry"`` (hand it out again) or ``"failed"`` (mark it failed, for a person)."""

    what: str
    message: dict[str, Any] | None = None
    error: str = ""


@dataclass(frozen=True)
class Verbs:
    """How a library takes, puts and marks a message: ``take()`` gives (its handle, the message as a
    dict) or None; the others take a message (``put``) or a handle. ``effects`` puts on the outbox."""

    take: Callable[[], "tuple[Any, dict[str, Any]] | None"]
    put: Callable[[dict[str, Any]], Any]
    effects: Callable[[dict[str, Any]], Any]
    done: Callable[[Any], Any]
    retry: Callable[[Any], Any]
    fail: Callable[[Any], Any]


def consume(world: Any, worker_id: str, queue: Verbs) -> str:
    """Take one message and run its step: put the next message (the effect on the outbox, after
    the last step), then mark it done; or hand it out again, or mark it failed. "idle": none to
    take; "busy": another process holds SQLite's write lock (the next iteration tries again)."""
    try:
        taken = queue.take()
        if taken is None:
            return "idle"
        handle, message = taken
        outcome = run_step(world, worker_id, message)
        if outcome.what == "next" and outcome.message is not None:
            (queue.effects if message["step"] == STEPS[-1] else queue.put)(outcome.message)
            queue.done(handle)
        else:
            (queue.retry if outcome.what == "retry" else queue.fail)(handle)
        return outcome.what
    except sqlite3.OperationalError as exc:
        if busy(exc):
            return "busy"
        raise


def drain_outbox(world: Any, outbox: Verbs) -> int:
    """Send every effect waiting on the outbox, marking each done after its delivery (a crash
    between the two sends it again: the receiver dedupes by its key); how many were sent."""
    sent = 0
    try:
        while (taken := outbox.take()) is not None:
            try:
                send_effect(world, taken[1])
            except RETRYABLE:  # the receiver is down: the next pass sends it
                outbox.retry(taken[0])
                break
            outbox.done(taken[0])
            sent += 1
    except sqlite3.OperationalError as exc:  # the database is locked: the next pass sends the rest
        if not busy(exc):
            raise
    return sent


def busy(exc: Exception) -> bool:
    """Whether ``exc`` says another process holds SQLite's write lock (try again later)."""
    return "locked" in str(exc) or "busy" in str(exc)


def first_message(job_id: str, payload: Any) -> dict[str, Any]:
    return {"job_id": job_id, "step": STEPS[0], "payload": payload, "inputs": {}}


def states() -> dict[str, tuple[str, ...]]:
    """The state table of a job read from its current message: ``<step>:<status>``. A message is
    taken (ready -> working), then it is done, failed or handed out again; a step's next message
    becomes the job's current one while its own is still working."""
    table: dict[str, tuple[str, ...]] = {}
    for i, step in enumerate(STEPS):
        after = (f"{STEPS[i + 1]}:ready",) if i + 1 < len(STEPS) else ()
        table[f"{step}:ready"] = (f"{step}:working",)
        table[f"{step}:working"] = (f"{step}:done", f"{step}:failed", f"{step}:ready", *after)
        table[f"{step}:done"] = after
        table[f"{step}:failed"] = ()
    return table


def run_step(world: Any, worker_id: str, message: dict[str, Any]) -> Outcome:
    """Run ``message``'s step; what to do with the message then. Retryable errors retry; anything
    else the step raises, or a verification that does not pass, fails the message."""
    job_id, step, inputs = message["job_id"], message["step"], message["inputs"]
    call = Call(job_id, step, worker_id)
    try:
        output = _STEP[step](world, call, message["payload"], inputs)
    except RETRYABLE as exc:
        return Outcome("retry", error=f"{type(exc).__name__}: {exc}")
    except Exception as exc:
        return Outcome("failed", error=f"{type(exc).__name__}: {exc}")
    after = {"job_id": job_id, "after": step, "output": output, "payload": message["payload"]}
    if step == STEPS[-1]:
        return Outcome("next", {**after, "kind": DELIVERY, "key": f"{job_id}:{DELIVERY}", "body": {"job": job_id, "fields": inputs["extract"]["fields"]}})
    return Outcome("next", {**after, "step": STEPS[STEPS.index(step) + 1], "inputs": {**inputs, step: output}})


def send_effect(world: Any, message: dict[str, Any]) -> None:
    """Deliver an outbox message to the world's receiver under its idempotency key."""
    world.sender.send(message["key"], message["kind"], message["body"])


def _fetch(world: Any, call: Call, payload: Any, inputs: dict[str, Any]) -> Any:
    source = payload.get("source") if isinstance(payload, dict) else None
    if not isinstance(source, str) or not source:
        raise ValueError("payload needs a non-empty string 'source'")
    text = world.documents.fetch(call, source)
    if len(text) > DOCUMENT_CHARS_MAX:
        raise ValueError(f"document {source!r} has {len(text)} characters; the limit is {DOCUMENT_CHARS_MAX}")
    return {"text": text, "chars": len(text)}


def _extract(world: Any, call: Call, payload: Any, inputs: dict[str, Any]) -> Any:
    fields = json.loads(world.model.complete(call, "extract", inputs["fetch"]["text"]).text)
    if not isinstance(fields, dict):
        raise ValueError(f"extract answer is not a JSON object: {fields!r}"[:120])
    return {"fields": fields}


def _verify(world: Any, call: Call, payload: Any, inputs: dict[str, Any]) -> Any:
    reply = world.model.complete(call, "verify", json.dumps(inputs["extract"]["fields"], sort_keys=True))
    if reply.text != "pass":
        raise ValueError(f"verification did not pass: {reply.text}")
    return {"verdict": "pass"}


def _deliver(world: Any, call: Call, payload: Any, inputs: dict[str, Any]) -> Any:
    return {"key": f"{call.job_id}:{DELIVERY}"}


_STEP: dict[str, Callable[[Any, Call, Any, dict[str, Any]], Any]] = {
    "fetch": _fetch, "extract": _extract, "verify": _verify, "deliver": _deliver}


class QueueSession:
    """A worker on a queue library: a subclass opens ``conn`` and sets ``queue`` and ``outbox``
    (the library's :class:`Verbs`), ``world``, ``worker_id`` and ``select_submitted`` (the query
    that finds a job's first message, so that submitting an id again is a no-op)."""

    conn: sqlite3.Connection
    queue: Verbs
    outbox: Verbs
    world: Any
    worker_id: str
    select_submitted: str

    def submit(self, job_id: str, payload: Any) -> None:
        if self.conn.execute(self.select_submitted, (job_id,)).fetchone() is None:
            self.queue.put(first_message(job_id, payload))

    def run_once(self) -> str:
        return consume(self.world, self.worker_id, self.queue)

    def send_outbox(self) -> int:
        return drain_outbox(self.world, self.outbox)

    def claim_only(self) -> None:
        """Take the next message and return, as a consumer killed right after taking it."""
        self.queue.take()

    def connection(self) -> sqlite3.Connection:
        return self.conn

    def set_busy_timeout(self, seconds: float) -> None:
        self.conn.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")

    def close(self) -> None:
        self.conn.close()


class QueuePipelineAdapter(RowsAdapter):
    """The pipeline's states, steps and entry points, for an adapter of a queue library: a
    subclass declares its ``schema`` (:class:`~chaos.adapters.rows.RowSchema`), ``library_files``
    (the library's modules, whose lines are crash points too), ``create_schema`` and ``open``."""

    table = states()
    steps = [(step, f"{step}:working", f"{step}:done") for step in STEPS]
    final = {f"{STEPS[-1]}:done": (DELIVERY,)}
    parked = tuple(f"{step}:failed" for step in STEPS)
    initial = (f"{STEPS[0]}:ready",)
    iteration = "until-idle"  # one message, one step, per run_once
    submit_conflict = "first-wins"  # an id already queued keeps its first payload
    fault_errors = PYTHON_ERRORS
    library_files: tuple[str, ...] = ()

    def targets(self) -> dict[str, Callable[..., Any]]:
        return {"worker": consume, "sender": drain_outbox}

    def trace_paths(self) -> list[str]:
        return [inspect.getfile(type(self)), __file__, *self.library_files]
