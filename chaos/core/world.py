"""The world the steps talk to: a paid model, a document source and an effect receiver.

It lives outside the engine's database, in a ledger of its own (a small SQLite file), and every
call is written there *before* the call returns, so the record survives the worker's SIGKILL. The
invariants are checked against this ledger and the engine's database, never against the worker's
own memory.

Faults are part of the world (their kinds and the errors they raise: :mod:`chaos.core.call_faults`):
arm one and the next matching call raises a timeout, a connection error, a 429 with Retry-After,
a 5xx, a 400, answers garbage, fails verification, or takes longer than the lease while a second
worker runs (interleaved deterministically, not by threads racing).
A sticky fault with ``per_job`` is an outage every job meets and outlives the same way: each job's
first calls fail, then the provider answers it.

>>> import tempfile
>>> from engine import FakeClock
>>> world = World(tempfile.mkdtemp(), FakeClock(0.0))
>>> world.arm(Fault("rate_limit", task="extract", retry_after_s=30))
>>> world.pending_faults()
[Fault(kind='rate_limit', task='extract', retry_after_s=30, duration_s=None, sticky=False, per_job=0, jobs=())]
"""

from __future__ import annotations

import inspect
import json
import os
import sqlite3
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping, TYPE_CHECKING

from engine import ModelReply
from engine import generated_document, local_answer

# The faults' vocabulary and the user's line have modules of their own; their names are re-exported
# here, where callers have long imported them from.
from chaos.core.call_faults import (
    ANSWER_FAULTS, ASTRAL, ASTRAL_ANSWER, BUG, FAULT_KINDS, HANG, HANG_REAL_S, MATRIX_FAULT_KINDS, OUTCOME_FAULTS, PRICE_FAULTS,
    SLOW_CALL_S_DEFAULT, STALL, STORE_FAULT_KINDS, TOO_LARGE, TOO_LARGE_CHARS, UNPRICED, UNSTORABLE, Fault, raise_fault,
)
from chaos.core.ledger_file import open_ledger
from chaos.core.origin import origin, shown
from chaos.core.thread_connections import ThreadConnections
from chaos.core.errors import ENGINE_ERRORS, PYTHON_ERRORS
from chaos.core.models import RECEIVERS, Receiver, receiver_model

if TYPE_CHECKING:
    from chaos.core.target import Target

__all__ = ["World", "Fault", "FAULT_KINDS", "STORE_FAULT_KINDS", "STALL", "HANG", "UNSTORABLE", "ANSWER_FAULTS", "BUG", "TOO_LARGE", "UNPRICED", "PRICE_FAULTS", "ASTRAL", "MATRIX_FAULT_KINDS", "OUTCOME_FAULTS", "Call", "Delivery", "USD_PER_1K_CHARS", "ENGINE_ERRORS", "PYTHON_ERRORS",
           "RECEIVERS", "Receiver", "raise_fault", "origin", "receiver_model", "shown"]

USD_PER_1K_CHARS = 0.002

LEDGER_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS call (
        seq INTEGER PRIMARY KEY, job_id TEXT, step TEXT, task TEXT, worker TEXT, token INTEGER,
        at REAL, memo_committed INTEGER, lease_valid INTEGER, fault TEXT, origin TEXT)""",
    """CREATE TABLE IF NOT EXISTS delivery (
        seq INTEGER PRIMARY KEY, key TEXT, kind TEXT, payload TEXT, at REAL, applied INTEGER, origin TEXT)""",
    "CREATE TABLE IF NOT EXISTS effect (key TEXT PRIMARY KEY, kind TEXT, payload TEXT, applied INTEGER)",
    # Every fault a step met, paid call or not (a document fetch is free): which job it changed.
    "CREATE TABLE IF NOT EXISTS fault (seq INTEGER PRIMARY KEY, job_id TEXT, step TEXT, task TEXT, kind TEXT)",
    # Every effect a step had outside the outbox (chaos.core.effects): what it did, from which line.
    "CREATE TABLE IF NOT EXISTS side_effect (seq INTEGER PRIMARY KEY, what TEXT, origin TEXT)",
    # Every exception a recovering worker raised through the user's code (chaos.core.raises): its text, its line.
    "CREATE TABLE IF NOT EXISTS raised (seq INTEGER PRIMARY KEY, error TEXT, origin TEXT)",
)
RECORD_ESCAPE = "INSERT INTO side_effect (what, origin) VALUES (?, ?)"
ERROR_TEXT_MAX = 2000  # characters of an exception's text the ledger keeps
RECORD_RAISED = "INSERT INTO raised (error, origin) VALUES (?, ?)"
RAISED = "SELECT error, origin FROM raised ORDER BY seq"
ESCAPES = "SELECT what, origin, COUNT(*) FROM side_effect GROUP BY what, origin ORDER BY MIN(seq)"
RECORD_FAULT = "INSERT INTO fault (job_id, step, task, kind) VALUES (?, ?, ?, ?)"
COUNT_JOB_FAULTS = "SELECT COUNT(*) FROM fault WHERE job_id = ? AND task = ? AND kind = ?"
# The send faults the receiver met inside a step that sends its effect itself (the adapter's
# sends_from_steps): each is a fault of that job's step, as a model's fault is of the step calling it.
SEND_TASK = "send"
STEP_SEND_FAULTS = "SELECT job_id, step, kind FROM fault WHERE task = 'send' AND job_id IS NOT NULL AND step IS NOT NULL ORDER BY seq"
RECORD_CALL = (
    "INSERT INTO call (job_id, step, task, worker, token, at, memo_committed, lease_valid, fault, origin) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
RECORD_DELIVERY = "INSERT INTO delivery (key, kind, payload, at, applied, origin) VALUES (?, ?, ?, ?, ?, ?)"


# The receiver's two models (an adapter's ``receiver``): one that dedupes by the effect key applies
# a key once and only records its later deliveries; a strict one applies every delivery (the
# effect table counts them), as the endpoint of an engine that promises exactly-once effects.
APPLY_EFFECT = {
    Receiver.DEDUPES: "INSERT INTO effect (key, kind, payload, applied) VALUES (?, ?, ?, 1) ON CONFLICT (key) DO NOTHING",
    Receiver.STRICT: "INSERT INTO effect (key, kind, payload, applied) VALUES (?, ?, ?, 1) "
                     "ON CONFLICT (key) DO UPDATE SET applied = applied + 1",
}



@dataclass(frozen=True)
class Call:
    """One paid call of the world's model, as the ledger holds it (:meth:`World.calls`).

    ``memo_committed`` says the step's result was already committed when the call was made (a call
    paid twice), ``lease_valid`` that the caller still held the job's lease; both come from the
    adapter's probe, and are ``False`` and ``True`` where it has none.
    """

    seq: int
    job_id: str
    step: str
    task: str
    worker: str
    token: int
    at: float
    memo_committed: bool
    lease_valid: bool
    fault: str | None
    origin: str = ""  # the user's line that made the call (see origin())


@dataclass(frozen=True)
class Delivery:
    """One request that reached the world's receiver (:meth:`World.deliveries`): ``applied`` says
    whether it applied the effect (a receiver that dedupes applies a key once)."""

    seq: int
    key: str
    kind: str
    applied: bool
    payload: str = ""  # the effect's payload as sent (JSON)
    origin: str = ""  # the user's line that sent it; "" for the engine's outbox sender


Probe = Callable[[str, str, str, int, float], "tuple[bool, bool]"]


class World:
    """The outside world of one scenario, recorded in ``<directory>/world.db``.

    A step reaches it through three services, each written down in the ledger before it returns,
    so that what a killed worker did is still known: ``world.model`` (a paid model:
    ``complete(ctx, task, prompt)`` answers a :class:`engine.ModelReply`), ``world.documents``
    (``fetch(ctx, source)`` answers the document's text) and ``world.sender`` (``send(key, kind,
    payload)``, the receiver an outbox sender delivers effects to). An adapter hands them to the
    user's workflow (``ReferenceAdapter.workflow(world)``); production passes real clients with the
    same methods. Everything else here is for the harness and for tests: arming faults, and reading
    back what the ledger recorded.
    """

    def __init__(self, directory: str, clock: Any, *, lease_s: float = 120.0,
                 errors: Mapping[str, Callable[[str], BaseException]] | None = None, receiver: str = Receiver.DEDUPES) -> None:
        if receiver not in RECEIVERS:
            raise ValueError(f"receiver {receiver!r} is not one of: {', '.join(RECEIVERS)}")
        self.directory = directory
        self.receiver = Receiver(receiver)  # dedupes: one effect per key; strict: every delivery applied
        self.errors = dict(ENGINE_ERRORS if errors is None else errors)
        self.glue: tuple[str, ...] = ()  # files origin() passes over (see for_adapter)
        # Effect kind -> the step that sends it itself (chaos.adapter.sending_steps): a send fault
        # met for such a kind is that step's, for the job its key names (see for_adapter).
        self.sent_by: dict[str, str] = {}
        self.ledger_path = os.path.join(directory, "world.db")
        self.clock = clock
        self.lease_s = lease_s
        self.probe: Probe = lambda job, step, worker, token, now: (False, True)
        self.during_slow: Callable[[], None] | None = None
        # Brings a store fault on (chaos.core.store_faults.InCall), in the process that calls.
        self.on_store_fault: Callable[[str], None] | None = None
        self._faults: list[Fault] = []
        self._ledgers = ThreadConnections(open_ledger, self.ledger_path, LEDGER_SCHEMA)  # see :attr:`conn`
        self.model = _Model(self)
        self.documents = _Documents(self)
        self.sender = _Receiver(self)

    @classmethod
    def for_adapter(cls, directory: str, clock: Any, target: Target, db: str | None = None) -> "World":
        """The world of a run of ``target``: its lease, its ``fault_errors`` if it maps them, its
        ``receiver`` (see :func:`receiver_model`) and, given the run's ``db``, its probe where it
        offers one (else paid calls are not classified)."""
        world = cls(directory, clock, lease_s=target.lease_s, errors=target.fault_errors, receiver=target.receiver)
        world.sent_by = dict(target.sent_by)
        if db is not None and target.probe is not None:
            world.probe = target.probe(db)
        try:
            world.glue = (inspect.getfile(type(target.adapter)),)  # the adapter bridges; the user's line is in their step
        except TypeError:  # a class defined where inspect cannot find its file
            pass
        return world

    # -- the ledger ----------------------------------------------------------------------------
    @property
    def conn(self) -> sqlite3.Connection:
        """This thread's ledger connection. A forked child opens its own, and so does each thread
        of an engine that runs its steps in threads (DBOS runs a workflow a thread): one sqlite3
        connection used by two threads at once mixes their transactions (a receiver's ``BEGIN``
        meets another thread's open one) and can leave a statement unfinished."""
        return self._ledgers.get()

    def close(self) -> None:
        """Close this process's ledger connections and the probe's."""
        self._ledgers.close()
        close_probe = getattr(self.probe, "close", None)
        if close_probe is not None:
            close_probe()

    def step_send_faults(self) -> list[tuple[str, str, str]]:
        """(job, step, fault kind) of every send fault met inside a step that sends its effect
        itself (the adapter's ``sends_from_steps``), in order."""
        return [tuple(r) for r in self.conn.execute(STEP_SEND_FAULTS)]  # type: ignore[misc]

    def record_send_fault(self, key: str, kind: str, fault: Fault) -> None:
        """Note a send fault as a fault of the step that sends ``kind`` itself, for the job ``key``
        names (``<job_id>:<kind>``); a kind no step sends itself (an outbox sender's), or a key of
        another form, is no step's, and nothing is noted."""
        step = self.sent_by.get(kind)
        suffix = f":{kind}"
        if step is None or not key.endswith(suffix) or len(key) == len(suffix):
            return
        self.conn.execute(RECORD_FAULT, (key[: -len(suffix)], step, SEND_TASK, fault.kind))

    def faults_met(self) -> list[tuple[str, str, str]]:
        """(job, task, fault kind) of every fault a step met, in order."""
        return [tuple(r) for r in self.conn.execute("SELECT job_id, task, kind FROM fault ORDER BY seq")]  # type: ignore[misc]

    def calls(self) -> list[Call]:
        """Every paid call of the model, in order, with who made it and what the probe said of it."""
        rows = self.conn.execute(
            "SELECT seq, job_id, step, task, worker, token, at, memo_committed, lease_valid, fault, origin FROM call ORDER BY seq"
        )
        return [Call(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bool(r[7]), bool(r[8]), r[9], r[10] or "") for r in rows]

    def deliveries(self) -> list[Delivery]:
        """Every request that reached the receiver, in order, applied or not."""
        rows = self.conn.execute("SELECT seq, key, kind, applied, payload, origin FROM delivery ORDER BY seq")
        return [Delivery(r[0], r[1], r[2], bool(r[3]), r[4] or "", r[5] or "") for r in rows]

    def record_escape(self, what: str, where: str) -> None:
        """An effect a step had outside the outbox (see :mod:`chaos.core.effects`), from ``where``."""
        self.conn.execute(RECORD_ESCAPE, (what, where))

    def escapes(self) -> list[tuple[str, str, int]]:
        """(what was done, the user's line, how many times) of every effect outside the outbox, in order."""
        return [(what, where, count) for what, where, count in self.conn.execute(ESCAPES)]

    def record_raised(self, error: str, where: str) -> None:
        """An exception raised through the user's code at ``where`` (see :mod:`chaos.core.raises`)."""
        self.conn.execute(RECORD_RAISED, (error[:ERROR_TEXT_MAX], where))

    def raised(self) -> dict[str, str]:
        """Each exception's text -> the user's line it was first raised at."""
        out: dict[str, str] = {}
        for error, where in self.conn.execute(RAISED):
            out.setdefault(error, where)
        return out

    def applied_effects(self) -> dict[str, int]:
        """Effects applied at the receiver, per idempotency key (1 each where the receiver dedupes;
        a strict receiver applies every delivery)."""
        rows = self.conn.execute("SELECT key, COUNT(*) FROM delivery WHERE applied = 1 GROUP BY key")
        return {key: count for key, count in rows}

    # -- faults --------------------------------------------------------------------------------
    def arm(self, fault: Fault) -> None:
        """Arm ``fault`` in this process: the next matching call meets it (every one, if sticky)."""
        self._faults.append(fault)

    def disarm(self) -> None:
        """Drop every armed fault: the outage is over."""
        self._faults.clear()

    def pending_faults(self) -> list[Fault]:
        """The faults armed and not used up yet, in the order they were armed."""
        return list(self._faults)

    def discard(self, fault: Fault) -> None:
        """Another process used ``fault`` up: this one's copy of it goes too (if still armed)."""
        if not fault.sticky and fault in self._faults:
            self._faults.remove(fault)

    def take_fault(self, task: str, job_id: str | None = None) -> Fault | None:
        """The fault the next call of ``task`` (for ``job_id``) meets, if any: a one-shot fault is
        used up; a ``per_job`` one applies while the job has met it fewer times than that."""
        for index, fault in enumerate(self._faults):
            if fault.task is not None and fault.task != task:
                continue
            if fault.jobs and job_id not in fault.jobs:
                continue
            if fault.per_job and not self._hits_job(fault, task, job_id):
                continue
            return fault if fault.sticky else self._faults.pop(index)
        return None

    def strike(self, fault: Fault | None) -> None:
        """Bring ``fault`` on the store if it is a store fault (a call that met it then answers as
        usual); any other fault is the caller's to raise."""
        if fault is None or fault.kind not in STORE_FAULT_KINDS:
            return
        if self.on_store_fault is None:
            raise RuntimeError(f"the {fault.kind} fault acts on the calling worker's store: its run installs "
                               "World.on_store_fault (the crash matrix's families do)")
        self.on_store_fault(fault.kind)

    def _hits_job(self, fault: Fault, task: str, job_id: str | None) -> bool:
        if job_id is None:  # a call of no job (the receiver's): an outage per job never reaches it
            return False
        (met,) = self.conn.execute(COUNT_JOB_FAULTS, (job_id, task, fault.kind)).fetchone()
        return met < fault.per_job

    # -- what the services share ---------------------------------------------------------------
    def record_fault(self, ctx: Any, task: str, fault: Fault) -> None:
        """Note that ``ctx``'s step met ``fault`` (before it acts: a slow call may outlive the step)."""
        self.conn.execute(RECORD_FAULT, (ctx.job_id, ctx.step, task, fault.kind))

    def record_call(self, ctx: Any, task: str, fault: Fault | None) -> None:
        """Write down a paid call of ``ctx``'s step (and the fault it met, if any) before it returns,
        with the probe's word on whether its memo was already committed and its lease still held."""
        if fault is not None:
            self.record_fault(ctx, task, fault)
        now = self.clock.now()
        token = getattr(ctx, "token", None)  # an engine without fencing tokens has none
        memo_committed, lease_valid = self.probe(ctx.job_id, ctx.step, ctx.worker_id, token, now)
        self.conn.execute(
            RECORD_CALL,
            (ctx.job_id, ctx.step, task, ctx.worker_id, token, now, memo_committed, lease_valid, fault and fault.kind, origin(self.glue)),
        )

    def deliver(self, key: str, kind: str, payload: Any) -> None:
        """The receiver: record every request; apply one effect per idempotency key, or, for a
        strict receiver, every delivery (a key already applied is applied again)."""
        payload_json = json.dumps(payload, sort_keys=True)
        now = self.clock.now()
        conn = self.conn
        # One transaction: a receiver that applied an effect but lost the request's record (or
        # the reverse) would make the ledger lie about what arrived.
        conn.execute("BEGIN IMMEDIATE")
        try:
            applied = conn.execute(APPLY_EFFECT[self.receiver], (key, kind, payload_json)).rowcount == 1
            conn.execute(RECORD_DELIVERY, (key, kind, payload_json, now, applied, origin(self.glue)))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def stall(self, ctx: Any, duration_s: float) -> None:
        """Stall a call for ``duration_s`` of fake time at once, without a heartbeat (a long GC pause
        inside it), run ``during_slow`` (another worker, which finds the lease expired), then
        heartbeat as the call goes on: an engine that fences learns there that it lost the job."""
        self.clock.advance(duration_s)
        hook, self.during_slow = self.during_slow, None
        if hook is not None:
            hook()
        (getattr(ctx, "heartbeat", None) or _no_heartbeat)()

    def slow(self, ctx: Any, duration_s: float) -> None:
        """Spend ``duration_s`` of fake time in a call, heartbeating as the engine's thread would."""
        # The engine's heartbeat thread beats every lease/3; beating more often here keeps the
        # last renewal before the step's deadline close to it, as a real thread's would be.
        slice_s = self.lease_s / 8
        spent = 0.0
        hook = self.during_slow
        heartbeat = getattr(ctx, "heartbeat", None) or (lambda: None)  # an engine without heartbeats lets the lease run out
        while spent < duration_s:
            step_s = min(slice_s, duration_s - spent)
            self.clock.advance(step_s)
            spent += step_s
            if hook is not None and spent > self.lease_s:
                self.during_slow = None
                run_second, hook = hook, None
                run_second()
            heartbeat()


def _no_heartbeat() -> None:
    """The heartbeat of an engine that has none: the lease simply runs out."""




class _Model:
    """A paid model whose every call is in the ledger before it returns (``world.model``)."""

    def __init__(self, world: World) -> None:
        self.world = world

    def complete(self, ctx: Any, task: str, prompt: str) -> ModelReply:
        """Answer ``prompt`` for ``task`` (a name of the caller's choosing, such as the step's; a
        fault armed for that task meets this call), and record the call first.

        The reply's ``text`` is the model's answer and ``cost_usd`` its price
        (:data:`USD_PER_1K_CHARS` per thousand characters of the prompt): return it as the step's
        cost. An armed fault makes the call raise the error a provider would (typed by the world's
        ``errors``), answer text the step cannot use, or take its time, heartbeating through ``ctx``.
        """
        world = self.world
        fault = world.take_fault(task, ctx.job_id)
        world.record_call(ctx, task, fault)
        cost = round(len(prompt) / 1000 * USD_PER_1K_CHARS, 8)
        if fault is not None:
            world.strike(fault)
            if fault.duration_s and fault.kind in world.errors:  # an error that takes its time to arrive
                world.stall(ctx, fault.duration_s)
            raise_fault(fault, task, world.errors)
            if fault.kind == "slow":
                world.slow(ctx, fault.duration_s or SLOW_CALL_S_DEFAULT)
            elif fault.kind == STALL:
                world.stall(ctx, fault.duration_s or world.lease_s + 1)
            elif fault.kind == HANG:
                world.clock.advance(fault.duration_s)
                threading.Event().wait(HANG_REAL_S)  # the process ends first
            elif fault.kind == "parse":
                return ModelReply("Sure! Here is the JSON you asked for:", cost)
            elif fault.kind == "verify_fail":
                return ModelReply("fail: the totals do not add up", cost)
            elif fault.kind in ANSWER_FAULTS:
                return ModelReply(ANSWER_FAULTS[fault.kind], cost)
            elif fault.kind in PRICE_FAULTS:
                return ModelReply(local_answer(task, prompt), PRICE_FAULTS[fault.kind])
            elif fault.kind == ASTRAL:
                return ModelReply(ASTRAL_ANSWER, cost)
            elif fault.kind in STORE_FAULT_KINDS and fault.duration_s:
                world.slow(ctx, fault.duration_s)  # the heartbeats meet the fault as well as the commit
        return ModelReply(local_answer(task, prompt), cost)


class _Documents:
    """The document source (``world.documents``): free, so not in the ledger's calls, but it can
    fail like any dependency (faults armed for the task ``fetch``, or for any task)."""

    def __init__(self, world: World) -> None:
        self.world = world

    def fetch(self, ctx: Any, source: str) -> str:
        """The text of the document ``source`` names (any string: the same source always gives the
        same text), or the error an armed ``fetch`` fault raises; a fault it met is recorded for
        ``ctx``'s job."""
        fault = self.world.take_fault("fetch", ctx.job_id)
        if fault is not None:
            self.world.record_fault(ctx, "fetch", fault)
            self.world.strike(fault)
            raise_fault(fault, "fetch", self.world.errors)
            if fault.kind == "slow":
                self.world.slow(ctx, fault.duration_s or SLOW_CALL_S_DEFAULT)
            elif fault.kind == TOO_LARGE:
                return "x" * TOO_LARGE_CHARS
        return generated_document(source)


class _Receiver:
    """The outbox sender's endpoint (``world.sender``): an idempotent receiver keyed by the outbox's
    key, or a strict one that applies every delivery (the world's ``receiver``)."""

    def __init__(self, world: World) -> None:
        self.world = world

    def send(self, key: str, kind: str, payload: Any) -> None:
        """Deliver one effect: ``key`` is the outbox row's idempotency key (``job:effect``, such as
        ``note-1:email``), ``kind`` the effect's name and ``payload`` its JSON-serialisable body.
        Returns once the receiver recorded it; an armed ``send`` fault raises instead, before
        anything arrives. It takes no ``ctx``: an outbox sender calls it, or a step that sends
        its effect itself, declared in the adapter's ``sends_from_steps`` (the fault is then
        noted as that step's, for the job the key names)."""
        fault = self.world.take_fault(SEND_TASK)
        if fault is not None:
            self.world.record_send_fault(key, kind, fault)
            self.world.strike(fault)
            raise_fault(fault, "send", self.world.errors)
        self.world.deliver(key, kind, payload)
