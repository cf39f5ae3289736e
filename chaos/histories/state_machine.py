"""Random histories: a Hypothesis state machine that drives an engine through submits, runs,
kills, clock jumps, faults, outbox sends and human actions, checking the invariants after each.

The crash matrix kills one iteration at every line of a few fixed scenarios; a history mixes
everything in a random order. Two workers and a sender share one SQLite file. A worker is killed
at a crash point drawn from a recording of the very iteration it is about to run (``_doom``). The
fake clock jumps, so leases expire and backoffs elapse. Faults are armed for the next calls. A
person requeues, resolves and cancels, legally or not. After every step the invariants that hold
at every moment are checked; at the end the faults stop, time passes every lease and backoff, the
system drains and the whole catalog is checked at rest. Hypothesis shrinks a failure to a
minimal program.

>>> from chaos import ReferenceAdapter
>>> machine_for(ReferenceAdapter()).__name__
'ReferenceHistories'
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections import Counter
from typing import Any, Callable, Iterable, TYPE_CHECKING

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from engine import STORE_UNAVAILABLE

from chaos.core.target import resolve
from chaos.adapter import REFERENCE_TARGET, Snapshot, load_adapter
from chaos.core.clock import SharedClock
from chaos.histories.lives import CLIENT, OPS, SECOND, SENDER, STORMER, Env, Frozen, HungStep, hung, kill, live, pause, record, resume
from chaos.histories.events import (JOB_IDS, PAYLOADS, POSITIONS, STORM_JOB_IDS, Advance, Arm, Event, Heal, Human, Kill,
                      KillAfterDelivery, KillBeforeDelivery, Machine, Pause, Resume, Run, Send, Storm, Submit, events,
                      history_jobs)
from chaos.core.invariants import INVARIANTS, Evidence, Violation, check, hangs, initial_states, retry_spread, submit_policy
from chaos.matrix.families import STORM_FAULTS
from chaos.core.iteration import one_iteration
from chaos.core.scenario import MODES, T0, task_names
from chaos.core.settle import settle
from chaos.core.world import Fault, World
from chaos.histories.alone import baseline_violations
from chaos.histories.databases import (FROZEN_BUSY_TIMEOUT_S, TEMPLATES, create, drop_templates, hold_write_lock, page_count,
                                       scratch_root, server_side)
from chaos.histories.at_rest import AtRest
from chaos.histories.violations import AT_REST, BEFORE, HUMAN_ACTIONS, InvariantViolated, kind_of, violated

if TYPE_CHECKING:
    from chaos.adapter import Adapter

__all__ = ["Histories", "InvariantViolated", "machine_for", "HUMAN_ACTIONS", "IGNORABLE", "AT_REST", "BEFORE", "baseline_violations", "kind_of", "violated", "drop_templates"]

NEEDS_HUMAN = "needs_human"  # the reference's state of a job waiting for a person
RETRY_AFTER_S = 30.0
FAULTS_ARMED_MAX = 4
START_JOBS_MAX = 3
CLOCK_STEP_BACK_S = 3600.0
# Outcomes of an iteration that gave up on the database mid-step: the step's work may be lost,
# and paid for again once the lease runs out.
GAVE_UP = STORE_UNAVAILABLE
# The invariants a history checks that an exploration may be told to look past (``ignore``).
IGNORABLE = (*INVARIANTS, HUMAN_ACTIONS)


class Histories(AtRest, RuleBasedStateMachine):
    """Random histories of one adapter's engine. Use :func:`machine_for`, which sets the adapter."""

    adapter: Adapter  # set by machine_for on the subclass it makes
    target: str = REFERENCE_TARGET
    modes: tuple[str, ...] = MODES
    jobs: tuple[str, ...] = JOB_IDS  # the pool: the adapter's first job ids (set by machine_for)
    storm_jobs: tuple[str, ...] = STORM_JOB_IDS  # a storm's herd: the adapter's next ones
    replay: str = ""
    ignore: frozenset[str] = frozenset()
    stats: Counter = Counter()
    ignored: Counter = Counter()  # violations of ignored invariants seen, per invariant

    def __init__(self) -> None:
        super().__init__()
        if self.adapter is None:
            raise TypeError("Histories needs an adapter: use chaos.machine.machine_for(adapter)")
        self.adapter = a = resolve(self.adapter)  # resolved once per history's machine: a target comes back as it is
        directory = tempfile.mkdtemp(prefix="history-", dir=scratch_root())
        db = create(a, directory)
        clock = SharedClock(T0)  # a forked worker's time passes for everyone
        world = World.for_adapter(directory, clock, a, db)
        self.env = Env(a, directory, clock, world, "main", db=db)
        self.env.template = TEMPLATES.get((os.getpid(), id(a))) if server_side(a) else None
        self.world, self.clock = world, clock
        self.table = a.states()
        self.step_states = a.step_states()
        self.settled = a.settled_states()
        self.final_effects = a.final_effects()
        self.working = {w: step for step, (w, _) in self.step_states.items()}
        # A person's actions: cancel a job not yet started, resolve one waiting for a person,
        # requeue a failed one; in the adapter's states (``initial_states()``, ``needs_human_states()``).
        self.cancellable = initial_states(a)
        self.awaiting_human = a.needs_human
        self.failed_states = {s for s in self.settled if self.table.get(s) and s not in self.awaiting_human}
        self.human_errors: tuple[type[BaseException], ...] = a.human_errors
        self.unavailable_errors: tuple[type[BaseException], ...] = a.unavailable_errors
        self.frozen: dict[str, Frozen] = {}
        self.held_lock: Any = None  # another connection in BEGIN IMMEDIATE (lock-held)
        self.humane = _humane(self.env)
        self.submitted: dict[str, str] = {}
        self.touched: set[str] = set()  # jobs a person's action moved
        self.refused_payloads = {json.dumps(self._payload("poison", j), sort_keys=True) for j in self.jobs}
        self.interruptions: Counter = Counter()
        self.counted: set[tuple[Any, ...]] = set()
        self.memos: dict[tuple[str, str], str] | None = None
        self.log: list[str] = []
        self.kills = 0
        self.stormed = False  # a storm ran (one a history)
        self.kind = "Submit"  # of the event that ran last: the one a violation found now is revealed by
        self.ok = True  # False while a step runs and after any failure: teardown then only cleans up
        self.stats["examples"] += 1

    # -- checks ------------------------------------------------------------------------------------
    def _inspect(self) -> Snapshot:
        return self.adapter.inspect(self.env.db)

    def _evidence(self, snapshot: Snapshot) -> Evidence:
        return Evidence(
            table=self.table,
            step_states=self.step_states,
            settled_states=self.settled,
            final_effects=self.final_effects,
            snapshot=snapshot,
            calls=self.world.calls(),
            deliveries=self.world.deliveries(),
            submitted=dict(self.submitted),
            interruptions=Counter(self.interruptions),
            previous_memos=self.memos,
            initial_states=initial_states(self.adapter),
            step_send_faults=self.world.step_send_faults(),
        )

    def _fail(self, violations: list[Violation], when: str | None = None) -> None:
        """Raise the violations, unless every one is of an ignored invariant (then count them and
        return: the history goes on, looking for something else)."""
        kept = [v for v in violations if v.invariant not in self.ignore]
        for v in violations:
            if v.invariant in self.ignore:
                self.ignored[v.invariant] += 1
        if not kept:
            return
        self.ok = False
        kind = AT_REST if when == AT_REST else self.kind
        raise violated(kept[0].invariant, kind)(kept, when or f"at step {len(self.log)}", self.log, self.replay)

    @invariant()
    def every_invariant_holds_now(self) -> None:
        snapshot = self._inspect()
        violations = check(self._evidence(snapshot), at_rest=False)
        if violations:
            self._fail(violations, f"after step {len(self.log)}" if self.log else "before any step")
        self.memos = dict(snapshot.memos)
        self.ok = True

    # -- steps -------------------------------------------------------------------------------------
    @initialize(jobs=st.integers(1, START_JOBS_MAX))
    def start(self, jobs: int) -> None:
        """Every history starts with work to do; later submits add, repeat and conflict."""
        for job in self.jobs[:jobs]:
            self._step(Submit(job))

    # The rule drawing every event is added by machine_for, which knows the kill modes.
    def _step(self, event: Event) -> None:
        self.ok = False
        self.stats["rules"] += 1
        self.log.append(f"{len(self.log) + 1}. {event}")
        self.kind = kind_of(event)
        handler = getattr(self, "_" + type(event).__name__.lower())
        try:
            outcome = handler(event)
        except HungStep as exc:
            outcome = str(exc)
        self._count_frozen_expiries()
        if outcome:
            self.log[-1] += f": {outcome}"
        if hung(outcome):  # a worker's process ran past the bound: killed, and a finding of its own
            self._fail([hangs(f"step {len(self.log)} ({event})", "", self.env.wait_s)])
        if outcome.startswith("raised"):
            self.stats["raised"] += 1

    def _advance(self, event: Advance) -> str:
        self.clock.advance(event.seconds)
        return ""

    def _run(self, event: Run) -> str:
        if event.worker in self.frozen:
            return f"ignored: {event.worker} is frozen"
        if event.kill is None:
            hooked = self.world.during_slow is not None
            worker = event.worker
            outcome = self._survive(worker, lambda: str(live(self.env, worker, lambda env: one_iteration(self.adapter, env.session(worker))())))
            # A step whose commit failed (a full disk, a held lock) is lost, not its lease: it is
            # paid for again once the lease runs out. So is a step the second worker of a slow
            # call (run, and so used up, in this iteration) left that way: its loop has ended.
            owners = ({SECOND} if hooked and self.world.during_slow is None else set()) | ({event.worker} if outcome in GAVE_UP else set())
            if owners:
                self._count_interruptions(owners)
            return outcome
        return self._kill_at_point(event.worker, "worker", event.kill)

    def _send(self, event: Send) -> str:
        if SENDER in self.frozen:
            return f"ignored: the {SENDER} is frozen"
        if event.kill is None:
            return self._survive(SENDER, lambda: f"{live(self.env, SENDER, lambda env: env.session(SENDER).send_outbox())} sent")
        if isinstance(event.kill, (KillBeforeDelivery, KillAfterDelivery)):
            self.kills += 1
            around = (event.kill.delivery, isinstance(event.kill, KillBeforeDelivery))
            return kill(self.env, SENDER, "sender", event.kill.mode, f"doomed-{self.kills}", None, around)
        return self._kill_at_point(SENDER, "sender", event.kill)

    def _survive(self, worker: str, iteration: Callable[[], str]) -> str:
        """An exception escaping an iteration ends that process, as a supervisor would see it: the
        history goes on with a restarted worker. (At rest, a worker that raises is a violation.)"""
        try:
            return iteration()
        except Exception as exc:
            self.env.bury(worker)
            self._count_interruptions({worker, SECOND})
            return f"raised {type(exc).__name__}: {exc}; its process died"

    def _submit(self, event: Submit) -> str:
        job, body = event.job, self._payload(event.payload, event.job)
        body_json = json.dumps(body, sort_keys=True)
        known = self.submitted.get(job)
        before = self._inspect()
        try:
            live(self.env, CLIENT, lambda env: env.session(CLIENT).submit(job, body))
        except self.unavailable_errors as exc:
            if self._inspect() != before:
                self._fail([Violation("idempotent-submit", f"submitting {job!r} was refused ({exc}) but changed the database")])
            return f"refused, the database unavailable ({exc})"
        except self.adapter.conflict_errors as exc:  # none declared: the target resolved them to ()
            problems = []
            if known is None or known == body_json:
                why = "it is new" if known is None else "it repeats the stored payload"
                problems.append(Violation("idempotent-submit", f"submitting {job!r} was refused as a conflict though {why}: {exc}"))
            if self._inspect() != before:
                problems.append(Violation("idempotent-submit", f"a conflicting submit of {job!r} was refused but changed the database"))
            if problems:
                self._fail(problems)
            return "refused as a conflict"
        if known is None:
            self.submitted[job] = body_json
            return "created"
        first_wins = submit_policy(self.adapter) == "first-wins"  # the engine keeps the first payload, declared
        if known != body_json and not first_wins:
            self._fail([Violation("idempotent-submit", f"re-submitting {job!r} with a different payload was accepted")])
        if self._inspect() != before:
            what = "its own payload" if known == body_json else "a different payload (the first one wins)"
            self._fail([Violation("idempotent-submit", f"re-submitting {job!r} with {what} changed the database")])
        return "a no-op"

    def _arm(self, event: Arm) -> str:
        if len(self.world.pending_faults()) >= FAULTS_ARMED_MAX:
            return f"ignored: {FAULTS_ARMED_MAX} faults are armed already"
        task = task_names(self.adapter).get(event.task, event.task)  # the reference's task names, as the adapter's steps call them
        self.world.arm(Fault(event.kind, task=task, retry_after_s=RETRY_AFTER_S if event.kind == "rate_limit" else None))
        if event.kind == "slow" and self.world.during_slow is None:
            self.world.during_slow = self.env.slow_hook()
        return "armed"

    def _human(self, event: Human) -> str:
        if not self.humane:
            return "ignored: the adapter's sessions have no human actions"
        verb, _, resolution = event.action.partition(" ")
        what = f"{event.action} {event.job!r}"
        before = self._inspect()
        view = before.jobs.get(event.job)
        state = view.state if view is not None else None
        legal = self._legal(verb, state)
        try:
            args = (event.job, *([resolution] if resolution else []))
            live(self.env, OPS, lambda env: getattr(env.session(OPS), verb)(*args))
        except self.human_errors + self.unavailable_errors as exc:
            problems = []
            busy = isinstance(exc, self.unavailable_errors)  # not a refusal: the database could not take it now
            if legal and not busy:
                problems.append(Violation(HUMAN_ACTIONS, f"{what} on a job in state {state!r} was refused: {exc}"))
            if self._inspect() != before:
                problems.append(Violation(HUMAN_ACTIONS, f"{what} was refused but changed the database"))
            if problems:
                self._fail(problems)
            return f"refused, the database unavailable ({exc})" if busy else f"refused ({exc})"
        if not legal:
            where = "an unknown job" if state is None else f"a job in state {state!r}"
            self._fail([Violation(HUMAN_ACTIONS, f"{what} on {where} was accepted")])
            return f"accepted on {where} (ignored)"  # only reached when human-actions is ignored
        after = self._inspect().jobs[event.job].state
        self.touched.add(event.job)
        # The step the job now waits for runs again: one more paid call for it is no waste.
        rerun = next((self.working[s] for s in self.table.get(after, ()) if s in self.working), None)
        if rerun is not None:
            self.interruptions[(event.job, rerun)] += 1
        return f"{state} -> {after}"

    def _legal(self, verb: str, state: str | None) -> bool:
        if state is None:
            return False
        if verb == "requeue":
            return state in self.failed_states
        return state in (self.awaiting_human if verb == "resolve" else self.cancellable)

    def _kill_at_point(self, worker: str, phase: str, how: Kill) -> str:
        self.kills += 1
        tag = f"doomed-{self.kills}"
        segments = record(self.env, worker, phase, tag)
        if len(segments) < 2:
            # No durable write anywhere in it: killed or not, it leaves the files as they are.
            self.env.bury(worker)
            return "nothing to kill: that iteration writes nothing"
        # The segment first (a stretch between two durable writes), then a point inside it.
        scaled = how.at * len(segments)
        segment = segments[scaled // POSITIONS]
        point = segment[(scaled % POSITIONS) * len(segment) // POSITIONS]
        exit_kind = kill(self.env, worker, phase, how.mode, tag, point, None)
        self._count_interruptions({worker, SECOND})
        return f"{exit_kind} at {point.id} (after durable write {scaled // POSITIONS} of {len(segments) - 1})"

    # -- a retry storm ------------------------------------------------------------------------------
    def _storm(self, event: Storm) -> str:
        """Submit the herd, let each of its jobs meet the matrix's storm faults, drain them on a
        paced clock in a fresh process, then check ``retry-spread`` on the calls it made (the
        rule's invariant check follows, as after any event)."""
        if self.stormed:
            return "ignored: a storm ran already"
        if self.frozen:
            return f"ignored: {', '.join(sorted(self.frozen))} frozen (a drain would take over what it holds)"
        if self.held_lock is not None or self.env.page_limit is not None:
            return "ignored: the machine is at fault (a drain could not write)"
        self.stormed = True
        bodies = {job: self._payload("plain", job) for job in self.storm_jobs}
        live(self.env, CLIENT, lambda env: [env.session(CLIENT).submit(job, body) for job, body in bodies.items()])
        self.submitted.update({job: json.dumps(body, sort_keys=True) for job, body in bodies.items()})
        names = task_names(self.adapter)
        # The herd's faults only: the history's own jobs meet what was armed for them, later.
        outage = [dataclasses.replace(f, task=names.get(f.task, f.task) if f.task else None, jobs=self.storm_jobs) for f in STORM_FAULTS]
        herd, inspect, settled, clock = frozenset(self.storm_jobs), self._inspect, self.settled, self.clock

        def of_the_herd() -> Snapshot:
            snapshot = inspect()
            return dataclasses.replace(snapshot, jobs={j: v for j, v in snapshot.jobs.items() if j in herd},
                                       outbox=[row for row in snapshot.outbox if row.job_id in herd])

        def drain(env: Env) -> tuple[list[Violation], bool]:
            env.world.disarm()  # this process's copy: the faults armed for the history stay armed in it
            env.world.during_slow = None
            for fault in outage:
                env.world.arm(fault)

            def restart(session: Any, n: int) -> Any:
                env.bury(STORMER)
                return env.session(STORMER)

            _, crashed, done = settle(env.session(STORMER), of_the_herd, settled, clock, restart=restart, paced=True)
            return crashed, done

        started = self.clock.now()
        crashed, done = live(self.env, STORMER, drain)
        problems = crashed[:1]
        if not done:
            waiting = sorted(j for j, v in of_the_herd().jobs.items() if v.state not in settled or v.lease_owner is not None)
            problems.append(Violation("drains", f"the storm's paced drain did not settle {', '.join(waiting)}"))
        problems += retry_spread(self._evidence(self._inspect()))
        outcome = f"{len(self.storm_jobs)} jobs met the outage and {'settled' if done else 'did not settle'} in {self.clock.now() - started:.1f} s of paced clock"
        if problems:
            self.log[-1] += f": {outcome}"  # what happened, in the report of the violation raised now
            self._fail(problems)
        return outcome

    # -- frozen workers -----------------------------------------------------------------------------
    def _pause(self, event: Pause) -> str:
        if event.worker in self.frozen:
            return f"ignored: {event.worker} is frozen already"
        phase = "sender" if event.worker == SENDER else "worker"
        self.kills += 1
        tag = f"doomed-{self.kills}"
        segments = record(self.env, event.worker, phase, tag)
        if len(segments) < 2:
            self.env.bury(event.worker)
            return "nothing to freeze: that iteration writes nothing"
        scaled = event.at * len(segments)
        segment = segments[scaled // POSITIONS]
        point = segment[(scaled % POSITIONS) * len(segment) // POSITIONS]
        self.env.shorten_busy_timeout(FROZEN_BUSY_TIMEOUT_S)
        frozen = pause(self.env, event.worker, phase, tag, point)
        if isinstance(frozen, str):
            # It ended first: raised, or gave up mid-step (a full disk, a held lock), leaving
            # the step to be paid for again once its lease runs out.
            self._count_interruptions({event.worker, SECOND})
            return frozen
        frozen.leases = [
            (job_id, job.state, job.lease_owner, job.lease_until)
            for job_id, job in self._inspect().jobs.items()
            if job.lease_owner == event.worker and job.state in self.working and job.lease_until is not None
        ]
        frozen.paused_at = self.clock.now()
        frozen.calls_before = len(self.world.calls())
        self.frozen[event.worker] = frozen
        return f"frozen at {point.id} (after durable write {scaled // POSITIONS} of {len(segments) - 1})"

    def _resume(self, event: Resume) -> str:
        frozen = self.frozen.pop(event.worker, None)
        if frozen is None:
            return f"ignored: {event.worker} is not frozen"
        woke_at, calls_at_wake = self.clock.now(), len(self.world.calls())
        outcome = resume(self.env, frozen)
        self._count_interruptions({event.worker, SECOND})  # as for a pause that ended first
        self._count_pause_interruptions(frozen, woke_at, calls_at_wake)
        return f"woke at {frozen.point.id} and {outcome}"

    # -- faults of the machine --------------------------------------------------------------------
    def _machine(self, event: Machine) -> str:
        if event.fault == "clock-back":
            self.clock.set(self.clock.now() - CLOCK_STEP_BACK_S)
            return f"every clock stepped back {CLOCK_STEP_BACK_S:.0f} s"
        if event.fault == "disk-full":
            if server_side(self.adapter):
                return "ignored: a full disk acts on a SQLite file, and this adapter's database is on a server"
            if self.env.page_limit is not None:
                return "ignored: the disk is full already"
            pages = page_count(self.env.db)
            self.env.shorten_busy_timeout(FROZEN_BUSY_TIMEOUT_S)
            if not self.env.limit_pages(pages):
                self.env.limit_pages(None)
                return "ignored: the adapter's sessions have no SQLite connection to fill the disk of"
            return f"the disk is full at {pages} pages"
        if self.held_lock is not None:
            return "ignored: the write lock is held already"
        self.env.shorten_busy_timeout(FROZEN_BUSY_TIMEOUT_S)
        self.held_lock = hold_write_lock(self.adapter, self.env.db)
        if self.held_lock is None:  # a frozen worker holds it (or what it needs): nothing more to inject
            return "ignored: a frozen worker holds the write lock"
        return "another connection holds the write lock"

    def _heal(self, event: Heal) -> str:
        healed = []
        if self.env.page_limit is not None:
            self.env.limit_pages(None)
            healed.append("space freed")
        if self.held_lock is not None:
            self.held_lock.release()
            self.held_lock = None
            healed.append("lock released")
        return ", ".join(healed) or "nothing to heal"

    def _count_pause_interruptions(self, frozen: Frozen, woke_at: float, calls_at_wake: int) -> None:
        """A pause interrupts the step the frozen worker was in at most once, and only where the
        pause cost it its lease (a stolen live lease stays a violation):

        * frozen past its lease, it may pay once more after it wakes, before it finds the lease
          gone: a call it makes without a valid lease;
        * the pause ate the step's time, so its lease ran out after it woke (renewal stops at the
          step's deadline) and another worker took the step over: a call by another worker
          after it woke.

        Neither counts where the lease was seen expiring while it was frozen (counted then).
        """
        seen = {(job, self.working[state]) for job, state, _, until in frozen.leases if (job, state, frozen.worker, until) in self.counted}
        held = {(job, self.working[state]): until for job, state, _, until in frozen.leases}
        for seq, call in enumerate(self.world.calls()[frozen.calls_before:], start=frozen.calls_before):
            key = (call.job_id, call.step)
            # Frozen past its lease: the one it held then (or, where it held none the harness could
            # see, one whole lease).
            expired = woke_at >= held[key] if key in held else woke_at - frozen.paused_at >= self.adapter.lease_s
            zombie = call.worker == frozen.worker and not call.lease_valid and expired
            # ... and where the pause took time at all (a pause no time passed in ate nothing).
            taken_over = key in held and call.worker != frozen.worker and seq >= calls_at_wake and woke_at > frozen.paused_at
            if (zombie or taken_over) and key not in seen:
                seen.add(key)
                self.interruptions[key] += 1

    def _count_frozen_expiries(self) -> None:
        """A frozen worker's step is interrupted once its lease runs out: another worker may take
        the job and pay for that step again (and the woken worker may pay once more, wasted)."""
        now = self.clock.now()
        for frozen in self.frozen.values():
            for lease in frozen.leases:
                job_id, state, _, until = lease
                if now >= until and lease not in self.counted:
                    self.counted.add(lease)
                    self.interruptions[(job_id, self.working[state])] += 1

    def _count_interruptions(self, owners: set[str]) -> None:
        """Steps whose worker died mid-step: each may be paid for once more."""
        for job_id, job in self._inspect().jobs.items():
            step = self.working.get(job.state)
            if step is None or job.lease_owner not in owners:
                continue
            lease = (job_id, job.state, job.lease_owner, job.lease_until)
            if lease not in self.counted:
                self.counted.add(lease)
                self.interruptions[(job_id, step)] += 1

    def _payload(self, kind: str, job: str) -> Any:
        """The payload a submit sends: the adapter's own (``payload(job_id)``) for a plain one; a
        revised one conflicts with it; a poison one is what the first step refuses: the adapter's
        ``poison_payload(job_id)``, else the reference workflow's (an empty source)."""
        if kind == "poison":
            hook = self.adapter.poison_payload
            return hook(job) if hook is not None else PAYLOADS["poison"](job)
        base = self.adapter.payload(job)
        if kind == "revised":
            return {**base, "revision": 2} if isinstance(base, dict) else {"revised": base}
        return base


def machine_for(adapter: Adapter, *, target: str | None = None, modes: Iterable[str] = MODES, ignore: Iterable[str] = ()) -> type[Histories]:
    """A :class:`Histories` subclass for ``adapter`` (an adapter object, or ``module:attr``).

    ``modes`` are the kill modes the kills draw from (``fork``, ``inprocess``). A violation of an
    invariant in ``ignore`` (names from :data:`IGNORABLE`) is counted in ``ignored``, not raised.
    """
    ignore = frozenset(ignore)
    unknown = sorted(ignore - set(IGNORABLE))
    if unknown:
        raise ValueError(f"ignore {', '.join(map(repr, unknown))}: not an invariant random histories check; pass one of: {', '.join(IGNORABLE)}")
    if isinstance(adapter, str):
        target = target or adapter
        adapter = load_adapter(adapter)
    adapter = resolve(adapter)  # the door: every history below reads the resolved target (a wrong word is refused here)
    modes = tuple(modes)
    if not modes or set(modes) - set(MODES):
        raise ValueError(f"modes {modes!r} must be a non-empty selection of: {', '.join(MODES)}")
    stem = type(adapter.adapter).__name__
    stem = stem[: -len("Adapter")] if stem.endswith("Adapter") and stem != "Adapter" else stem
    # The adapter's own job ids, known now and built into the events drawn: a history of an
    # orders project submits order-1001, and its findings and its printed program name it.
    jobs, storm_jobs = history_jobs(adapter)

    @rule(event=events(modes, jobs))
    def step(self: Histories, event: Event) -> None:
        self._step(event)

    namespace = {
        "adapter": adapter,
        "target": target or f"{type(adapter).__module__}:{type(adapter).__qualname__}",
        "modes": modes,
        "jobs": jobs,
        "storm_jobs": storm_jobs,
        "stats": Counter(),
        "ignore": ignore,
        "ignored": Counter(),
        "step": step,
        "__module__": __name__,
        "__doc__": f"Random histories of the {stem} engine ({', '.join(modes)} kills).",
    }
    return type(stem + "Histories", (Histories,), namespace)


def _humane(env: Env) -> bool:
    """Whether the adapter's sessions take a person's actions (asked in a child, as everything
    that opens a session is)."""
    return bool(live(env, OPS, lambda e: all(hasattr(e.session(OPS), verb) for verb in ("requeue", "resolve", "cancel"))))
