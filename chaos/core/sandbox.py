"""A sandbox: a fresh engine database and world for one test, driven one action at a time.

It is what a scripted fault-plan scenario runs on, and what the ``chaos_world`` fixture hands a
test: workers and an outbox sender on a fake clock, faults to arm, the human actions, a ``drain``
that lets time pass every lease and backoff, and the invariant catalog checked against the
database and the world's ledger (never against what a worker believes).

>>> import tempfile
>>> from chaos import Sandbox, reference_adapter
>>> box = Sandbox(reference_adapter(), tempfile.mkdtemp())
>>> box.submit("doc-1")
>>> box.drain()
>>> box.states()
{'doc-1': 'delivered'}
>>> box.check()
[]
>>> box.close()
"""

from __future__ import annotations

import json
import math
import os
import random
from collections import Counter
from typing import Any, TYPE_CHECKING

from engine import NO_PROGRESS, FakeClock

from chaos.core import pristine
from chaos.core.models import TimeSource
from chaos.core.context import RunContext, close_quietly
from chaos.core.invariants import Evidence, Violation, check, idempotent_submit, wasted_calls
from chaos.core.world import Call, Fault, World

if TYPE_CHECKING:
    from chaos.core.target import Target

__all__ = ["Sandbox", "T0"]

T0 = 1_700_000_000.0
ITERATIONS_MAX = 1_000  # worker iterations in one run_until_idle; a job finishes in far fewer
SENDS_MAX = 1_000  # outbox passes in one send_until_empty
DRAIN_ROUNDS_MAX = 2_000  # each round handles at least one due lease, retry or outbox backoff
TICKS_MAX = 100_000  # poll(): ticks of fake time
OUTBOX_JUMP_S = 33.0  # past any outbox backoff (it is capped at 32 s)
DUE_EPSILON_S = 0.001  # a job due at t runs once the clock has passed t


class Sandbox(RunContext):
    """A fresh database (``<directory>/engine.db``) and world (``world.db``) for ``adapter``,
    driven in the test's own process (see :class:`~chaos.core.context.RunContext` for the files).

    Every worker is a session of the adapter, opened on first use by its id and kept until
    :meth:`close`. ``seed`` seeds each worker's RNG (its backoff jitter), so a run replays exactly.
    """

    @property
    def adapter(self) -> Any:
        """The adapter as the test gave it (``chaos_world.adapter``); the harness reads :attr:`target`,
        the adapter resolved when the sandbox was made."""
        return self.target.adapter

    def __init__(self, adapter: Target | Any, directory: str, *, seed: int = 0, clock_at: float = T0) -> None:
        from chaos.core.target import resolve  # the sandbox is a door too (chaos_world): an adapter is resolved here, once

        adapter = resolve(adapter)
        if adapter.time_source is TimeSource.WALL:
            raise ValueError(
                f"adapter {adapter.name!r} declares time_source = 'wall': a sandbox (a scripted fault plan, chaos_world) drives "
                "its engine in the test's own process, where time.time stays the machine's; pass the engine the clock open() "
                "gets, or gate it with the crash matrix and random histories, whose workers run in processes of their own")
        # From now on this process holds what the code under test leaves in memory: no scenario may
        # be forked from it (chaos.core.pristine).
        pristine.taint("the in-process sandbox: chaos_world or a scripted fault plan")
        os.makedirs(directory, exist_ok=True)
        db = os.path.join(directory, "engine.db")
        clock = FakeClock(clock_at)
        super().__init__(adapter, directory, clock, World.for_adapter(directory, clock, adapter, db), db)
        self.seed = seed
        self.started_at = clock_at
        adapter.create(self.db)
        self.submitted: dict[str, str] = {}
        # Steps a person decided to run again (requeue, resolve reverify): each may be paid once more.
        self.interruptions: Counter = Counter()
        self._sessions: dict[str, Any] = {}

    # -- workers ---------------------------------------------------------------------------------
    def session(self, worker: str = "w1") -> Any:
        """The session of worker ``worker`` (opened on first use)."""
        session = self._sessions.get(worker)
        if session is None:
            session = self._sessions[worker] = self.open_session(worker, random.Random(f"{self.seed}:{worker}"))
        return session

    def submit(self, job_id: str, payload: Any = None, *, worker: str = "w1") -> None:
        """Submit ``job_id`` with ``payload``, or else the adapter's own for it (see
        :attr:`chaos.core.target.Target.payload`); conflicts raise."""
        payload = self.target.payload(job_id) if payload is None else payload
        self.session(worker).submit(job_id, payload)
        self.submitted.setdefault(job_id, json.dumps(payload, sort_keys=True))

    def run(self, times: int = 1, *, worker: str = "w1") -> list[str]:
        """``times`` worker iterations now; returns their outcomes (``idle``, ``done``, ...)."""
        return [self.session(worker).run_once() for _ in range(times)]

    def run_until_idle(self, *, worker: str = "w1") -> int:
        """Worker iterations until nothing is due now; returns how many did something."""
        session = self.session(worker)
        for done in range(ITERATIONS_MAX):
            if session.run_once() in NO_PROGRESS:
                return done
        raise AssertionError(f"worker {worker!r} still had work after {ITERATIONS_MAX} iterations at one instant")

    def send(self, *, worker: str = "w1") -> int:
        """Outbox passes until nothing is due now; returns the rows delivered."""
        session = self.session(worker)
        sent = 0
        for _ in range(SENDS_MAX):
            delivered = session.send_outbox()
            if not delivered:
                return sent
            sent += delivered
        raise AssertionError(f"the outbox still had rows due after {SENDS_MAX} passes")

    def advance(self, seconds: float) -> None:
        """Move the run's fake clock on by ``seconds``: leases expire, retries and outbox rows come due."""
        self.clock.advance(seconds)

    # -- faults ----------------------------------------------------------------------------------
    def arm(self, fault: Fault) -> None:
        """Arm ``fault`` in the world: the next matching call meets it (every one, if sticky)."""
        self.world.arm(fault)

    def heal(self) -> None:
        """Every armed fault is gone: the outage is over."""
        self.world.disarm()

    # -- time passing ----------------------------------------------------------------------------
    def poll(self, duration_s: float, tick_s: float, *, worker: str = "w1") -> None:
        """A worker that polls every ``tick_s`` for ``duration_s`` of fake time: at each tick it
        runs every due job and delivers the due outbox rows, so calls happen when they are due."""
        ticks = math.ceil(duration_s / tick_s)
        if not 0 < ticks <= TICKS_MAX:
            raise ValueError(f"poll of {duration_s}s every {tick_s}s is {ticks} ticks; allowed: 1..{TICKS_MAX}")
        for _ in range(ticks):
            self.run_until_idle(worker=worker)
            self.send(worker=worker)
            self.clock.advance(tick_s)

    def drain(self, *, worker: str = "w1") -> None:
        """Run until every job is settled, no lease is held and the outbox is empty, moving the
        clock to the next due lease, retry or outbox backoff whenever nothing is due now."""
        settled = self.target.settled_states()
        for _ in range(DRAIN_ROUNDS_MAX):
            self.run_until_idle(worker=worker)
            self.send(worker=worker)
            snapshot = self.target.inspect(self.db)
            waiting = [j for j in snapshot.jobs.values() if j.state not in settled or j.lease_owner is not None]
            unsent = [row for row in snapshot.outbox if row.sent_at is None]
            if not waiting and not unsent:
                return
            now = self.clock.now()
            future = [t for j in waiting for t in (j.lease_until, j.next_run_at) if t is not None and t >= now]
            self.clock.advance(min(future) - now + DUE_EPSILON_S if future and not unsent else OUTBOX_JUMP_S)
        raise AssertionError(f"the system did not drain in {DRAIN_ROUNDS_MAX} rounds: {self.states()}")

    # -- what a person does ----------------------------------------------------------------------
    def requeue(self, job_id: str, *, worker: str = "w1") -> None:
        """Send a job in a failed state back to the state before the step that failed."""
        self._human(worker, "requeue", job_id)

    def resolve(self, job_id: str, action: str, *, worker: str = "w1") -> None:
        """Settle a ``needs_human`` job: ``reverify`` or ``cancel``."""
        self._human(worker, "resolve", job_id, action)

    def cancel(self, job_id: str, *, worker: str = "w1") -> None:
        """Cancel ``job_id``, as a person would, where the engine's table allows it."""
        self._human(worker, "cancel", job_id)

    def _human(self, worker: str, action: str, job_id: str, *args: Any) -> None:
        method = getattr(self.session(worker), action, None)
        if method is None:
            raise TypeError(
                f"the target's session has no {action}(); add {action}(job_id{', action' if args else ''}) "
                "to your Session to script human actions"
            )
        method(job_id, *args)
        rerun = self._step_after(self.states().get(job_id))
        if rerun is not None:  # the person asked for that step to be paid for once more
            self.interruptions[(job_id, rerun)] += 1

    def _step_after(self, state: str | None) -> str | None:
        steps = list(self.target.step_states().items())
        if not steps or state is None:
            return None
        if state == "pending":
            return steps[0][0]
        for (_, (_, done)), (name, _) in zip(steps, steps[1:]):
            if done == state:
                return name
        return None

    # -- what happened ---------------------------------------------------------------------------
    def states(self) -> dict[str, str]:
        """Each job's state in the engine's database, by job id."""
        return {job_id: job.state for job_id, job in sorted(self.target.inspect(self.db).jobs.items())}

    def last_errors(self) -> dict[str, str | None]:
        """Each job's ``last_error``: what the engine says went wrong last (None if nothing)."""
        return {job_id: job.last_error for job_id, job in sorted(self.target.inspect(self.db).jobs.items())}

    def calls(self, task: str | None = None) -> list[Call]:
        """Paid calls in the world's ledger (of ``task`` only, if given), in order."""
        return [c for c in self.world.calls() if task is None or c.task == task]

    def applied(self) -> dict[str, int]:
        """Effects applied at the receiver, per idempotency key."""
        return self.world.applied_effects()

    def evidence(self) -> Evidence:
        """What the invariants are checked against: the engine's database and the world's ledger, read now."""
        return Evidence.gather(self.target, self.db, self.world, submitted=dict(self.submitted), interruptions=Counter(self.interruptions))

    def wasted_calls(self) -> int:
        """Paid calls whose result was not memoised: what crashes, faults and retries cost so far."""
        return wasted_calls(self.evidence())

    def check(self, *, at_rest: bool = True) -> list[Violation]:
        """The invariant catalog now (the at-rest catalog, plus the active idempotent-submit
        check, if ``at_rest``: call it after :meth:`drain`)."""
        violations = check(self.evidence(), at_rest=at_rest)
        if at_rest and self.submitted:
            inspect = lambda: self.target.inspect(self.db)  # noqa: E731
            violations += idempotent_submit(self.session("w-check"), inspect, self.submitted, self.target.conflict_errors,
                                            self.target.submit_conflict)
        return violations

    def close(self) -> None:
        """Close every worker's session and give the database and the ledger back."""
        for session in self._sessions.values():
            close_quietly(session)
        self._sessions.clear()
        self.give_back()
