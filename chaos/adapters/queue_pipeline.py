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
from the library's rows. Neither library offers more than take, put and mark, so the consumer does
what a careful user of one writes on top:

- **a memo per job and step**: a message whose step's memo (the next message) exists is marked
  done unrun, and the next message is put only where none exists, in one write transaction with
  the check; a message handed out again after its consumer put the next one is paid for once;
- **a delayed retry with full jitter**, carried in the message (``not_before``, the clock's time):
  a retryable failure puts the message back with ``uniform(1, min(32, 2**attempt))`` seconds to
  wait (rewritten in place and handed out again, where the library can rewrite an item); a
  consumer takes the first message due where the library takes one by its id
  (:meth:`QueueSession.first_due`), else it puts a message not yet due back at the tail, and
  answers "idle" once it meets the same one again (the queue holds nothing due): no busy loop;
- **an attempt limit**: a message counts its attempts (``attempt``; in the library's own row at
  the take where the library can rewrite an item, so that a consumer killed mid-step counts too),
  and a step tried :data:`ATTEMPTS_MAX` times is marked failed, for a person;
- **store errors handled**: a write the database refuses (locked, an I/O error, a full disk) ends
  the iteration as "busy"; the message taken is handed out again where the library can write
  that, and nothing is ever lost by the consumer's doing.

>>> message = first_message("doc-1", {"source": "doc-1"})
>>> message["step"], message["inputs"], message["attempt"]
('fetch', {}, 0)
>>> import random
>>> [round(backoff_s(random.Random(0), k), 2) for k in (1, 3, 9)]  # full jitter: uniform(1, min(32, 2**k))
[1.84, 6.91, 27.18]
"""

from __future__ import annotations

import inspect
import json
import random
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from chaos.adapter import PYTHON_ERRORS
from chaos.adapters.rows import RowSchema, RowsAdapter, register_decoders

__all__ = ["STEPS", "DELIVERY", "ATTEMPTS_MAX", "Call", "Outcome", "Verbs", "QueueSession", "QueuePipelineAdapter", "first_message",
           "backoff_s", "claim", "consume", "drain_outbox", "run_step", "send_effect", "states", "RETRYABLE", "STEP_CALLS"]

STEPS = ("fetch", "extract", "verify", "deliver")
DELIVERY = "delivery"
STATUSES = ("ready", "working", "done", "failed")  # each message's status, as the adapters name the library's
DOCUMENT_CHARS_MAX = 200_000  # the reference fetch step's limit
SENDS_MAX = 10_000  # effects one outbox pass sends at most
RETRYABLE = (TimeoutError, ConnectionError)  # the world's faults as Python's errors (chaos.adapter.PYTHON_ERRORS)
ATTEMPTS_MAX = 5  # a step's attempts, crashed ones counted where the library can record them
BACKOFF_S_MAX = 32.0  # full jitter's widest window
# The queries a session derives from its adapter's declaration of the library's rows.
SELECT_JOB = "SELECT 1 FROM {table} WHERE {job_id} = ? LIMIT 1"
SELECT_MEMO = "SELECT 1 FROM {table} WHERE ({where}) AND {job_id} = ? AND {step} = ? LIMIT 1"
SELECT_DUE = "SELECT 1 FROM {table} WHERE {status} IN ({ready}) AND COALESCE({next_run_at}, 0) <= ? LIMIT 1"
SELECT_FIRST_DUE = "SELECT {order} FROM {table} WHERE {status} IN ({ready}) AND COALESCE({next_run_at}, 0) <= ? ORDER BY {order} LIMIT 1"


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
    dict) or None; the others take a message (``put``) or a handle. ``effects`` puts on the outbox.
    ``count(handle, message)`` rewrites the library's row, where the library can rewrite an item:
    the message's attempt at the take, its ``not_before`` at a retry (None: attempts are counted,
    and retries wait, in the messages put back)."""

    take: Callable[[], "tuple[Any, dict[str, Any]] | None"]
    put: Callable[[dict[str, Any]], Any]
    effects: Callable[[dict[str, Any]], Any]
    done: Callable[[Any], Any]
    retry: Callable[[Any], Any]
    fail: Callable[[Any], Any]
    count: Callable[[Any, dict[str, Any]], Any] | None = None


def consume(session: "QueueSession") -> str:
    """Take one message due and run its step: put the next message (the effect on the outbox,
    after the last step) unless its memo is there already, then mark it done; or put it back to
    wait out its backoff; or mark it failed. "idle": nothing due; "busy": the database refused a
    write (its write lock held elsewhere, an I/O error, a full disk): the next iteration tries again."""
    queue = session.queue
    try:
        claimed = claim(session)
        if isinstance(claimed, str):
            return claimed
        handle, message = claimed
        outcome = run_step(session.world, session.worker_id, message)
        try:
            if outcome.what == "next" and outcome.message is not None:
                put_once(session, message, outcome.message, queue.effects if message["step"] == STEPS[-1] else queue.put)
            elif outcome.what == "retry" and message["attempt"] < ATTEMPTS_MAX:
                later = session.clock.now() + backoff_s(session.rng, message["attempt"])
                if queue.count is not None:  # rewritten in place and handed out again: no copy, even with a crash between
                    queue.count(handle, {**message, "not_before": later})
                    queue.retry(handle)
                    return outcome.what
                put_once(session, message, {**message, "not_before": later}, queue.put)
            else:
                queue.fail(handle)
                return "failed"
            queue.done(handle)
        except sqlite3.Error:
            release(queue, handle)  # handed out again: its memo, if the put got in, skips the step then
            raise
        return outcome.what
    except sqlite3.Error:
        return "busy"


def claim(session: "QueueSession") -> "tuple[Any, dict[str, Any]] | str":
    """Take the next message due, its attempt counted: (its handle, the message), or what the
    consumer did instead: "idle" (nothing due), "skipped" (its step's memo exists: marked done
    unrun), "deferred" (not due yet: put back at the tail), "failed" (its attempts ran out)."""
    queue = session.queue
    if not session.anything_due():  # a read: no message is taken only to be put back
        return "idle"
    taken = queue.take()
    if taken is None:
        return "idle"
    handle, message = taken
    try:
        if message.get("not_before", 0.0) > session.clock.now():  # ahead of one due: the tail, then the next
            # Met twice in one iteration (the clock does not move within one): nothing is due.
            key = (message["job_id"], message["step"], message.get("attempt", 0))
            met = key in session.deferred
            session.deferred.add(key)
            # The tail, unless its step's memo exists (a copy a crash left: the step ran), then done. Where
            # the library commits its put (persist-queue), a crash between leaves two: the first run skips the other.
            put_once(session, message, message, queue.put)
            queue.done(handle)
            return "idle" if met else "deferred"
        if session.memo_exists(message["job_id"], message["step"]):  # handed out again after its next one was put
            queue.done(handle)
            return "skipped"
        session.deferred.clear()
        message = {**message, "attempt": message.get("attempt", 0) + 1}
        if queue.count is not None:
            queue.count(handle, message)
        if message["attempt"] > ATTEMPTS_MAX:  # a message that took a consumer down each time
            queue.fail(handle)
            return "failed"
    except sqlite3.Error:
        release(queue, handle)
        raise
    return handle, message


def put_once(session: "QueueSession", message: dict[str, Any], following: dict[str, Any], put: Callable[[dict[str, Any]], Any]) -> bool:
    """Put ``following`` unless the memo of ``message``'s step exists (another consumer ran that
    step and put its next message): the check and the put in one write transaction, so that two
    consumers of one message never put two next messages."""
    with write_lock(session.conn):
        if session.memo_exists(message["job_id"], message["step"]):
            return False
        put(following)
        return True


@contextmanager
def write_lock(conn: sqlite3.Connection) -> Iterator[None]:
    """The database's write lock on ``conn`` through the block (``BEGIN IMMEDIATE``), committed
    after it unless the library's own write committed already (persist-queue commits each put)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:  # the store's error is the one to report; SQLite rolled back itself
                pass
        raise
    if conn.in_transaction:
        conn.execute("COMMIT")


def release(verbs: Verbs, handle: Any) -> None:
    """Hand a taken message out again after a store error; where that write fails too, the
    message stays taken (persist-queue resumes it at the next open; litequeue never does)."""
    try:
        verbs.retry(handle)
    except sqlite3.Error:
        pass


def drain_outbox(session: "QueueSession") -> int:
    """Send every effect waiting on the outbox, marking each done after its delivery (a crash
    between the two sends it again: the receiver dedupes by its key); how many were sent. A
    receiver down or a database error stops the pass; the next one sends the rest."""
    outbox, sent = session.outbox, 0
    for _ in range(SENDS_MAX):
        try:
            taken = outbox.take()
        except sqlite3.Error:
            break
        if taken is None:
            break
        try:
            send_effect(session.world, taken[1])
            outbox.done(taken[0])
        except (*RETRYABLE, sqlite3.Error):
            release(outbox, taken[0])
            break
        sent += 1
    return sent


def backoff_s(rng: random.Random, attempt: int) -> float:
    """Full jitter: the wait before the retry that follows ``attempt`` failures, uniform in
    [1, min(32, 2**attempt)] seconds, so that what failed together does not retry together."""
    return rng.uniform(1.0, min(BACKOFF_S_MAX, 2.0 ** attempt))


def first_message(job_id: str, payload: Any) -> dict[str, Any]:
    return {"job_id": job_id, "step": STEPS[0], "payload": payload, "inputs": {}, "attempt": 0}


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
    try:  # an output no message can hold (NaN) is poison: refused before any put, never stored half-readable
        json.dumps(output, allow_nan=False)
    except ValueError as exc:
        return Outcome("failed", error=f"the output of step {step!r} cannot be stored: {exc}")
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
STEP_CALLS = _STEP  # each step's work on the world, for a workflow engine that runs the steps itself (chaos.adapters.dbos_workflow)


class QueueSession:
    """A worker on a queue library: a subclass opens ``conn`` (the one connection the library's
    writes go through) and sets ``queue`` and ``outbox`` (the library's :class:`Verbs`), ``world``
    and ``worker_id``; :meth:`bind` gives it the adapter's declaration of the library's rows
    (whose job and memo expressions find a submitted job and a step's memo), a clock and an RNG."""

    conn: sqlite3.Connection
    queue: Verbs
    outbox: Verbs
    world: Any
    worker_id: str
    schema: RowSchema
    clock: Any
    rng: random.Random
    deferred: set[tuple[str, str, int]]  # the messages put back, not due, since a step last ran

    def bind(self, schema: RowSchema, clock: Any, rng: random.Random) -> "QueueSession":
        register_decoders(self.conn)
        self.schema, self.clock, self.rng, self.deferred = schema, clock, rng, set()
        return self

    def memo_exists(self, job_id: str, step: str) -> bool:
        """Whether a message of ``job_id`` names ``step`` as the step it follows: the step's memo."""
        return any(self.conn.execute(SELECT_MEMO.format(table=f'"{m.table}"', where=m.where, job_id=m.job_id, step=m.step),
                                     (job_id, step)).fetchone() for m in self.schema.memos)

    def anything_due(self) -> bool:
        """Whether a message is ready and due now (its ``not_before`` passed, or none)."""
        jobs = self.schema.jobs
        ready = ", ".join(str(int(value)) for value, name in jobs.statuses.items() if name == "ready")
        query = SELECT_DUE.format(table=f'"{jobs.table}"', status=jobs.status, ready=ready or "NULL", next_run_at=jobs.next_run_at)
        return self.conn.execute(query, (self.clock.now(),)).fetchone() is not None

    def first_due(self) -> Any:
        """The ``order`` (the library's id) of the first message ready and due now, or None: for a
        library that takes a message by its id, so that a consumer takes only a message due. Put
        back at the tail instead, a message is a new copy and its original marked done in a second
        commit where the library commits each write (persist-queue): a takeover between the two
        (a resumption at open) runs the original while its copy waits, two messages of one step."""
        jobs = self.schema.jobs
        ready = ", ".join(str(int(value)) for value, name in jobs.statuses.items() if name == "ready")
        query = SELECT_FIRST_DUE.format(table=f'"{jobs.table}"', status=jobs.status, ready=ready or "NULL",
                                        next_run_at=jobs.next_run_at, order=jobs.order)
        row = self.conn.execute(query, (self.clock.now(),)).fetchone()
        return None if row is None else row[0]

    def submit(self, job_id: str, payload: Any) -> None:
        jobs = self.schema.jobs
        with write_lock(self.conn):  # an id submitted twice at once is queued once
            if self.conn.execute(SELECT_JOB.format(table=f'"{jobs.table}"', job_id=jobs.job_id), (job_id,)).fetchone() is None:
                self.queue.put(first_message(job_id, payload))

    def run_once(self) -> str:
        return consume(self)

    def send_outbox(self) -> int:
        return drain_outbox(self)

    def claim_only(self) -> None:
        """Take the next message due and count its attempt, then return: a consumer killed right after its claim."""
        claim(self)

    def connection(self) -> sqlite3.Connection:
        return self.conn

    def set_busy_timeout(self, seconds: float) -> None:
        self.conn.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")

    def close(self) -> None:
        self.conn.close()


class QueuePipelineAdapter(RowsAdapter):
    """The pipeline's states, steps and entry points, for an adapter of a queue library: a
    subclass declares its ``schema`` (:class:`~chaos.adapters.rows.RowSchema`, whose job rows name
    ``next_run_at`` as the message's ``not_before``), ``library_files`` (the library's modules,
    whose lines are crash points too), ``session_type`` (``session_type(db, world, worker_id)``
    opens a :class:`QueueSession`) and ``create_schema``."""

    table = states()
    steps = [(step, f"{step}:working", f"{step}:done") for step in STEPS]
    final = {f"{STEPS[-1]}:done": (DELIVERY,)}
    parked = tuple(f"{step}:failed" for step in STEPS)
    initial = (f"{STEPS[0]}:ready",)
    iteration = "until-idle"  # one message, one step, per run_once
    submit_conflict = "first-wins"  # an id already queued keeps its first payload
    fault_errors = PYTHON_ERRORS
    library_files: tuple[str, ...] = ()
    session_type: type[QueueSession]

    def open(self, db: str, world: Any, *, worker_id: str, clock: Any, rng: random.Random) -> QueueSession:
        return self.session_type(db, world, worker_id).bind(self.schema, clock, rng)  # type: ignore[call-arg]

    def targets(self) -> dict[str, Callable[..., Any]]:
        return {"worker": consume, "sender": drain_outbox}

    def trace_paths(self) -> list[str]:
        return [inspect.getfile(type(self)), __file__, *self.library_files]
