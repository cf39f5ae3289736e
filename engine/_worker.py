"""The worker: claim a job, run its steps, commit each result once.

One call of :meth:`Worker.run_once` claims one ready job (or one whose lease expired) and drives it
through as many steps as it can. For each step it looks up the memo first: a step whose result was
committed is never run again. Otherwise it runs the step with a timeout shorter than the lease,
renewing the lease while the step runs, and then commits the memo row, the step's outbox rows and
the state advance in ONE fenced transaction. Kill the worker anywhere: before that commit the step
re-runs (one wasted call); after it, the memo is found and the step is skipped.

>>> from engine import FakeClock, SqliteStore, Step, Workflow
>>> wf = Workflow("hello", [Step("greet", lambda ctx: {"hi": ctx.payload["name"]})])
>>> store = SqliteStore(":memory:")
>>> _ = store.submit("j1", {"name": "ada"}, now=0.0)
>>> Worker(store, wf, clock=FakeClock(0.0), threaded=False).run_once().outcome
'done'
>>> store.get("j1").state, store.get("j1").result
('greet_done', {'hi': 'ada'})
"""

from __future__ import annotations

import queue
import random
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ._clock import Clock, SystemClock
from ._errors import DamagedRow, InvalidInput, LeaseLost, StepTimeout, StoreBusy, StoreFailed, ValidationFailed
from ._inputs import check_text, finite_number, loads
from ._lease import LEASE_S_DEFAULT, LeasePolicy
from ._outcome import NO_PROGRESS, Outcome
from ._retry import ATTEMPTS_MAX, BACKOFF_S_MAX, backoff_s, classify
from ._store import Claim, Completion, Memo, Store, dumps, load_payload
from ._workflow import NEEDS_HUMAN, NeedsHuman, Step, StepOutput, Workflow

__all__ = ["Worker", "StepContext", "RunResult"]

# The threaded runner wakes 4 times per heartbeat interval (or per timeout, if shorter) to check the
# timeout and heartbeat. As the timeout is shorter than the lease, a step reaches it in fewer than
# 12 waits; this bound only stops the loop if the monotonic clock itself stalls.
WAITS_MAX = 10_000
# Worker.run backs off after a database failure (disk full, I/O error): the idle sleep doubles
# with every failure in a row, up to this many seconds, so a failing disk is not hammered.
STORE_BACKOFF_S_MAX = 30.0


class _ClaimMemos:
    """The memo rows of one claim's job: each step's lookup, and the inputs of the steps after it.

    A step's lookup reads the job's memo rows once, which are also the step's inputs; only a step
    found there is read again, for its cost. If there were none (a job claimed fresh at its first
    step: the common case), the store is not asked again during the claim: while the claim's lease
    holds, only this worker can add memo rows for the job (each memo insert is part of a completion
    fenced by its token), and memo rows never change. So a later step has no memo row, and its
    inputs are the JSON this worker itself committed; each step still gets freshly parsed objects,
    exactly as a read would give. After a memo was found, or if earlier memos existed, every step
    reads. (A worker whose lease was taken over meanwhile may then run one step in vain: its commit
    is fenced off, and the harness counts that call as the interruption's wasted spend.)

    When the claim itself saw that the job has no memo rows (``Claim.has_memos`` is False: the
    store looked within the claim's own transaction), the first lookup is not read either: by the
    same argument no row can appear that this worker does not write.
    """

    __slots__ = ("_texts", "_read")

    def __init__(self, has_memos: bool | None = None) -> None:
        self._texts: dict[str, str] | None = {} if has_memos is False else None  # None: read from the store
        self._read: dict[str, Any] | None = None  # the rows the current step's lookup read

    def lookup(self, store: Store, job_id: str, step: str) -> Memo | None:
        if self._texts is not None:
            return None  # see the class docstring: no memo row can exist that this worker did not write
        self._read = store.memos(job_id)
        return store.memo(job_id, step) if step in self._read else None

    def load(self, store: Store, job_id: str) -> dict[str, Any]:
        if self._texts is None:
            inputs = self._read if self._read is not None else store.memos(job_id)
            self._read = None
            self._texts = None if inputs else {}
            return inputs
        return {name: loads(text) for name, text in self._texts.items()}

    def committed(self, step: str, output_json: str) -> None:
        if self._texts is not None:
            self._texts[step] = output_json

    def forget(self) -> None:
        self._texts = self._read = None


@dataclass(frozen=True)
class _Route:
    """Where a step leads and what its checks call it, worked out once per worker.

    A completion needs the step's states, the step after it, its declared effects and the names
    its input checks use in an error; they are fixed by the workflow, so they are not derived
    again on every step. So are the two moves a completion makes (working -> done -> the next
    step's working state): they are checked against the state table (:meth:`Workflow.check`)
    here, once, as the table they are checked against is fixed too. Every other move (a retry,
    a park, a person's action) is checked when it is made.
    """

    working: str
    done: str
    next_working: str | None  # the working state of the step after this one; None after the last
    final: bool  # ``done`` is the workflow's final state: the completion releases the job
    timeout_s: float
    effects: frozenset[str]  # the effect kinds the step declares
    cost_what: str  # how an error names the step's cost, its output
    output_what: str

    @classmethod
    def of(cls, workflow: Workflow, step: Step, lease: LeasePolicy) -> "_Route":
        nxt = workflow.next_step(step.done_state)
        workflow.check(step.working_state, step.done_state)
        if nxt is not None:
            workflow.check(step.done_state, nxt.working_state)
        return cls(
            working=step.working_state,
            done=step.done_state,
            next_working=None if nxt is None else nxt.working_state,
            final=step.done_state == workflow.final_state,
            timeout_s=lease.step_timeout_s(step.timeout_s),
            effects=frozenset(step.effects),
            cost_what=f"cost_usd of step {step.name!r}",
            output_what=f"output of step {step.name!r}",
        )


class _StepThread:
    """One long-lived helper thread that runs a worker's steps, one at a time.

    Starting a thread per step cost more than the whole rest of a trivial step (a thread start is
    a GIL hand-off plus an OS thread), so the worker keeps one and hands it each call through a
    queue. A step that outlives its timeout takes its thread with it: the worker abandons the
    thread (it exits when the call returns) and starts a fresh one for the next step.
    """

    def __init__(self, worker_id: str) -> None:
        self._calls: queue.SimpleQueue[tuple[Any, Any] | None] = queue.SimpleQueue()
        self._results: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=f"steps-{worker_id}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                return
            fn, ctx = call
            try:
                result: tuple[str, Any] = ("value", fn(ctx))
            except BaseException as exc:  # handed to the worker thread, which re-raises it
                result = ("error", exc)
            del fn, ctx, call  # hold no reference to a finished step's context while idle
            self._results.put(result)
            del result

    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, fn: Any, ctx: Any) -> None:
        self._calls.put((fn, ctx))

    def result(self, wait_s: float) -> tuple[str, Any] | None:
        """The finished call's ``(kind, value)``, or None if it is still running after ``wait_s``."""
        try:
            return self._results.get(timeout=wait_s)
        except queue.Empty:
            return None

    def stop(self) -> None:
        """Let the thread exit once its current call (if any) returns."""
        self._calls.put(None)


class StepContext:
    """What a step function sees: the job, the outputs of earlier steps, the time, a heartbeat."""

    def __init__(
        self,
        worker: "Worker",
        claim: Claim,
        step: Step,
        payload: Any,
        inputs: dict[str, Any],
        deadline: float,
    ) -> None:
        self.job_id = claim.job_id
        self.step = step.name
        self.payload = payload
        self.inputs = inputs
        self.attempt = claim.attempts + 1
        self.worker_id = worker.worker_id
        self.token = claim.token
        self.deadline = deadline
        self._worker = worker
        self._claim = claim
        self._state = step.working_state
        self._lease_until = claim.lease_until

    def now(self) -> float:
        """The worker's clock now (a fake one under the harness): a step reads the time here."""
        return self._worker.clock.now()

    @property
    def lease_until(self) -> float:
        """When the job's lease runs out unless renewed (``heartbeat`` renews it), on the worker's clock."""
        return self._lease_until

    def heartbeat(self) -> None:
        """Renew the lease; raise :class:`LeaseLost` if another worker took the job over.

        Renewal stops at the step's deadline, so a hung step eventually frees its job (see
        :meth:`engine._lease.LeasePolicy.heartbeat_until`).
        """
        worker = self._worker
        now = worker.clock.now()
        until = worker.lease.heartbeat_until(lease_until=self._lease_until, deadline=self.deadline, now=now)
        if until is None:
            return
        try:
            with worker._db_lock:
                renewed = worker.store.heartbeat(self._claim, state=self._state, until=until, now=now)
        except (StoreBusy, StoreFailed):
            # The database is locked by another process, or the disk failed: skip this renewal,
            # the lease still runs. A busy or failing database must never look like a failure of
            # the step (its commit will meet the same database, and back off there).
            return
        if not renewed:
            raise LeaseLost(f"job {self.job_id!r}: lease token {self.token} was taken over during step {self.step!r}")
        self._lease_until = until


@dataclass(frozen=True)
class RunResult:
    """What one :meth:`Worker.run_once` did: an :class:`~engine.Outcome`, the job and its state.

    ``error`` is what the database reported when the outcome is ``unavailable``, so that a loop
    that gives up can say why.
    """

    outcome: Outcome
    job_id: str | None = None
    state: str | None = None
    steps_run: int = 0
    steps_skipped: int = 0
    error: str | None = None


class Worker:
    """A worker process's engine loop. One per process; its store is never shared across fork.

    ``threaded=True`` (the default) runs each step in a helper thread so a hung call is abandoned
    at its timeout while the lease is renewed automatically; ``threaded=False`` runs steps inline
    (deterministic: what the chaos harness uses) and relies on steps calling ``ctx.heartbeat()``.
    The threaded runner measures a step's time on ``monotonic`` (default :func:`time.monotonic`,
    which no wall-clock step moves); the lease's times are the ``clock``'s.
    """

    # What steps receive; a subclass may extend it (the harness swaps it to plant bugs).
    context_class = StepContext

    def __init__(
        self,
        store: Store,
        workflow: Workflow,
        *,
        worker_id: str = "worker",
        clock: Clock | None = None,
        rng: random.Random | None = None,
        lease_s: float = LEASE_S_DEFAULT,
        step_timeout_s: float | None = None,
        attempts_max: int = ATTEMPTS_MAX,
        backoff_s_max: float = BACKOFF_S_MAX,
        threaded: bool = True,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if step_timeout_s is not None:
            step_timeout_s = finite_number("step_timeout_s", step_timeout_s)  # not a crash point: a setting, read when the worker is made
        if isinstance(attempts_max, bool) or not isinstance(attempts_max, int):
            raise InvalidInput(f"attempts_max={attempts_max!r} must be an integer >= 1")  # not a crash point: a bad setting, refused when the worker is made
        backoff_s_max = finite_number("backoff_s_max", backoff_s_max, minimum=0.0)
        check_text(worker_id, f"worker_id {worker_id!r}")  # it is stored as the lease's owner
        self.lease = LeasePolicy.for_steps(lease_s, {s.name: s.timeout_s for s in workflow.steps}, default_timeout_s=step_timeout_s)
        if attempts_max < 1:
            raise InvalidInput(f"attempts_max={attempts_max!r} must be >= 1")  # not a crash point: a bad setting, refused when the worker is made
        self.store = store
        self.workflow = workflow
        self.worker_id = worker_id
        self.clock: Clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.lease_s = self.lease.lease_s
        self.step_timeout_s = self.lease.default_timeout_s
        self.attempts_max = attempts_max
        self.backoff_s_max = backoff_s_max
        self.threaded = threaded
        self.monotonic = monotonic
        self._db_lock = threading.Lock()
        self._runner: _StepThread | None = None
        self._starts = {
            state: workflow.next_step(state).working_state  # type: ignore[union-attr]
            for state in workflow.ready_states
        }
        self._routes = {step.name: _Route.of(workflow, step, self.lease) for step in workflow.steps}

    # -- the loop -----------------------------------------------------------------------------
    def claim(self) -> Claim | None:
        """Claim the next due job (or take over an expired lease) and return the claim, or None."""
        return self.store.claim(self.worker_id, now=self.clock.now(), lease_s=self.lease_s, starts=self._starts)

    def run_once(self) -> RunResult:
        """Claim one job and drive it as far as it goes; see the module docstring."""
        try:
            claim = self.claim()
        except StoreBusy:
            return RunResult(Outcome.BUSY)
        except StoreFailed as exc:
            return self._store_failed(exc, None)
        if claim is None:
            return RunResult(Outcome.IDLE)
        ran = skipped = 0
        outcome = Outcome.LEASE_LOST
        memos = _ClaimMemos(claim.has_memos)
        for _ in range(len(self.workflow.steps)):  # a job passes each step at most once per claim
            step = self.workflow.step_for_working(claim.state)
            if step is None:
                return self._quarantine(claim, f"state {claim.state!r} is not a working state of workflow {self.workflow.name!r}")
            try:
                if claim.attempts >= self.attempts_max:
                    outcome = self._give_up(claim, step)
                    break
                outcome, nxt, was_run = self._advance(claim, step, memos)
            except StoreBusy:
                return RunResult(Outcome.BUSY, claim.job_id, claim.state, ran, skipped)
            except StoreFailed as exc:
                # Nothing of the failed transaction was written: the job keeps its state and this
                # worker's lease, and is taken up again (by anyone) once the lease expires.
                return self._store_failed(exc, claim)
            except DamagedRow as exc:
                return self._quarantine(claim, str(exc))
            ran += was_run
            skipped += not was_run and outcome in (Outcome.ADVANCED, Outcome.DONE)
            if nxt is None:
                break
            claim = nxt
        # "done" means this worker's own fenced commit just moved the job to the final state, so it
        # need not read the row back; every other outcome reports what the database says now.
        state = self.workflow.final_state if outcome == Outcome.DONE else self._peek_state(claim.job_id)
        return RunResult(outcome, claim.job_id, state, ran, skipped)

    def run(self, *, idle_sleep_s: float = 0.2, iterations_max: int | None = None, stop: threading.Event | None = None) -> int:
        """Loop :meth:`run_once` until ``stop`` is set (or ``iterations_max``); returns jobs touched."""
        touched = 0
        iteration = 0
        failures = 0  # database failures in a row
        while (stop is None or not stop.is_set()) and (iterations_max is None or iteration < iterations_max):
            iteration += 1
            result = self.run_once()
            failures = failures + 1 if result.outcome == Outcome.UNAVAILABLE else 0
            if failures:
                delay_s = min(STORE_BACKOFF_S_MAX, idle_sleep_s * 2.0 ** min(failures, 16))
                self.clock.sleep(delay_s * (0.5 + self.rng.random()))
            elif result.outcome in NO_PROGRESS:
                self.clock.sleep(idle_sleep_s * (0.5 + self.rng.random()))
            else:
                touched += 1
        return touched

    # -- one step -------------------------------------------------------------------------------
    def _advance(self, claim: Claim, step: Step, memos: _ClaimMemos) -> tuple[Outcome, Claim | None, bool]:
        """Run (or skip via memo) one step and commit. Returns (outcome, claim to continue, ran)."""
        memo = memos.lookup(self.store, claim.job_id, step.name)
        if memo is not None:
            memos.forget()
            committed = self._commit(claim, step, StepOutput(memo.output, memo.cost_usd), write_memo=False, memos=memos)
            return committed[0], committed[1], False
        route = self._routes[step.name]
        payload = load_payload(claim.job_id, claim.payload_json)
        timeout = route.timeout_s
        ctx = self.context_class(self, claim, step, payload, memos.load(self.store, claim.job_id), deadline=self.clock.now() + timeout)
        try:
            raw = self._call(step, ctx, timeout)
        except LeaseLost:
            return Outcome.LEASE_LOST, None, True
        except Exception as exc:  # a step's failure is data, not a crash of the worker
            return self._failed(claim, step, exc), None, True
        if isinstance(raw, NeedsHuman):
            if not step.review:
                # A bug in the workflow's code, found after the step's paid call: like an output
                # that cannot be stored (below), it fails the job as poison after this one call.
                # Raised out of run_once, it would kill the worker, and the job would be paid for
                # again every time its lease expired, until "lease expired 5 times" hid the cause.
                return self._failed(claim, step, ValidationFailed(
                    f"step {step.name!r} returned NeedsHuman ({_text(raw.reason, repr)}) but is not a review step; "
                    "declare Step(review=True), or raise an error instead"
                )), None, True
            return self._park(claim, step, NEEDS_HUMAN, f"{step.name}: needs review: {_text(raw.reason, str)}", None), None, True
        output = raw if isinstance(raw, StepOutput) else StepOutput(raw)
        try:
            encoded = self._encode(step, route, output)
        except InvalidInput as exc:
            # What the step returned cannot be stored, or breaks what its step declares: it will
            # return the same next time, so it fails as poison after this one call, saying why,
            # instead of escaping run_once (the job would then be re-run and paid for until its
            # lease had expired five times).
            return self._failed(claim, step, ValidationFailed(str(exc))), None, True
        committed = self._commit(claim, step, output, write_memo=True, memos=memos, encoded=encoded)
        return committed[0], committed[1], True

    def _call(self, step: Step, ctx: StepContext, timeout_s: float) -> Any:
        if not self.threaded:
            return step.fn(ctx)
        runner = self._runner
        if runner is None or not runner.alive():  # first call, after a timeout, or after a fork
            runner = self._runner = _StepThread(self.worker_id)
            weakref.finalize(self, runner.stop)
        runner.submit(step.fn, ctx)
        started = self.monotonic()
        wait_s = min(self.lease.heartbeat_every_s, timeout_s) / 4
        for _ in range(WAITS_MAX):
            done = runner.result(wait_s)
            if done is not None:
                kind, value = done
                if kind == "error":
                    raise value
                return value
            if self.monotonic() - started >= timeout_s:
                # The thread is abandoned: it may finish its call, but it can write nothing,
                # because every write goes through this worker and is fenced by the lease token.
                # The next step gets a new thread; this one exits once its call returns.
                self._runner = None
                runner.stop()
                raise StepTimeout(f"step {step.name!r} exceeded its {timeout_s}s timeout")
            ctx.heartbeat()
        raise AssertionError(f"step {step.name!r}: waited {WAITS_MAX} times without reaching its timeout")  # not a crash point: a bug guard: the step's timeout ends the wait long before

    def _encode(self, step: Step, route: _Route, output: StepOutput) -> tuple[str, dict[str, str], float]:
        """The JSON of a step's output and effects, and its cost as a float; :class:`InvalidInput`
        if they cannot be stored, or if the effects are not a mapping of kinds the step declares."""
        cost = finite_number(route.cost_what, output.cost_usd, minimum=0.0)
        output_json = dumps(output.output, what=route.output_what)
        if not isinstance(output.effects, Mapping):
            raise InvalidInput(
                f"effects of step {step.name!r} must be a dict of effect kind to payload, not {type(output.effects).__name__}; "
                "for example StepOutput(output, effects={'email': {...}})"
            )
        if not output.effects:
            return output_json, {}, cost
        undeclared = set(output.effects) - route.effects
        if undeclared:
            raise InvalidInput(
                f"step {step.name!r} emitted effects [{', '.join(sorted(map(repr, undeclared)))}] it does not declare; "
                f"add them to Step(effects=...) (declared: {list(step.effects)})"
            )
        effects = {kind: dumps(p, what=f"effect {kind!r} of step {step.name!r}") for kind, p in output.effects.items()}
        return output_json, effects, cost

    def _commit(
        self,
        claim: Claim,
        step: Step,
        output: StepOutput,
        *,
        write_memo: bool,
        memos: _ClaimMemos,
        encoded: tuple[str, dict[str, str], float] | None = None,
    ) -> tuple[Outcome, Claim | None]:
        route = self._routes[step.name]
        output_json, effects, cost = encoded if encoded is not None else self._encode(step, route, output)
        nxt = route.next_working  # the moves were checked against the table once (see _Route)
        now = self.clock.now()
        lease_until = self.lease.renewed(claimed_until=claim.lease_until, now=now)
        completion = Completion(
            step=step.name,
            from_state=route.working,
            done_state=route.done,
            output_json=output_json,
            now=now,
            lease_until=lease_until,
            cost_usd=cost,
            effects=effects,
            next_state=nxt,
            release_at=None if route.final else now,
            result_json=output_json if route.final else None,
            write_memo=write_memo,
        )
        with self._db_lock:
            ok = self.store.complete(claim, completion)
        if not ok:
            return Outcome.LEASE_LOST, None
        memos.committed(step.name, output_json)
        if nxt is None:
            return (Outcome.DONE if route.final else Outcome.ADVANCED), None
        # Built directly: dataclasses.replace is several times slower, and this runs on every step.
        return Outcome.ADVANCED, Claim(claim.job_id, nxt, claim.payload_json, 0, claim.token, lease_until)

    # -- leaving a step without a result ---------------------------------------------------------
    def _failed(self, claim: Claim, step: Step, exc: BaseException) -> Outcome:
        retryable, retry_after_s = classify(exc, step.retry_on)
        error = f"{step.name}: {_described(exc)}"
        attempts = claim.attempts + 1
        bad_state = step.failed_state or NEEDS_HUMAN
        if not retryable:
            return self._park(claim, step, bad_state, error, None, attempts=attempts)
        if attempts >= self.attempts_max:
            return self._park(claim, step, bad_state, f"gave up after {attempts} attempts: {error}", None, attempts=attempts)
        delay_s = backoff_s(attempts, self.rng, self.backoff_s_max)
        if retry_after_s is not None:
            delay_s = max(delay_s, float(retry_after_s))
        before = self.workflow.before(step)
        return self._park(claim, step, before, error, self.clock.now() + delay_s, attempts=attempts)

    def _give_up(self, claim: Claim, step: Step) -> Outcome:
        error = (
            f"{step.name}: lease expired {claim.attempts} times during this step (a worker died or hung "
            "each time); parked so it cannot take more workers down"
        )
        return self._park(claim, step, step.failed_state or NEEDS_HUMAN, error, None, attempts=claim.attempts)

    def _park(self, claim: Claim, step: Step, to_state: str, error: str, next_run_at: float | None, *, attempts: int | None = None) -> Outcome:
        self.workflow.check(step.working_state, to_state)
        if not self._park_in_store(claim, step.working_state, to_state, claim.attempts if attempts is None else attempts, error, next_run_at):
            return Outcome.LEASE_LOST
        if to_state == NEEDS_HUMAN:
            return Outcome.NEEDS_HUMAN
        return Outcome.RETRY if next_run_at is not None else Outcome.FAILED

    def _park_in_store(self, claim: Claim, from_state: str, to_state: str, attempts: int, error: str, next_run_at: float | None) -> bool:
        with self._db_lock:
            return self.store.park(claim, from_state=from_state, to_state=to_state, attempts=attempts, error=error,
                                   next_run_at=next_run_at, now=self.clock.now())

    # -- what the machine did ---------------------------------------------------------------------
    def _store_failed(self, exc: StoreFailed, claim: Claim | None) -> RunResult:
        """The database failed (disk full, I/O error): report it and let the loop back off.

        Never raised out of the loop: nothing of the failed transaction was written, the job
        keeps its state and lease, and the next iteration (or another worker, once the lease
        expires) takes it up again when the disk recovers.
        """
        if claim is None:
            return RunResult(Outcome.UNAVAILABLE, error=str(exc))
        return RunResult(Outcome.UNAVAILABLE, claim.job_id, claim.state, error=str(exc))

    def _quarantine(self, claim: Claim, why: str) -> RunResult:
        """Park a job whose row is damaged, with ``why`` as its last_error; the loop goes on.

        A working state goes to its step's failed state (a review step's: needs_human). A state
        the table does not know goes to the first step's failed state, whose requeue leads back
        to pending: the steps whose memo rows are intact are then skipped, never paid for again.
        A known state in which no step works (its ``next_run_at`` was set outside the engine) is
        only released: it keeps its state and stops being claimable.
        """
        step = self.workflow.step_for_working(claim.state)
        if step is None and claim.state in self.workflow.table:
            to_state = claim.state
        else:
            to_state = (step or self.workflow.steps[0]).failed_state or NEEDS_HUMAN
        if step is not None:
            self.workflow.check(claim.state, to_state)
        try:
            ok = self._park_in_store(claim, claim.state, to_state, claim.attempts, f"quarantined: {why}", None)
        except StoreBusy:
            return RunResult(Outcome.BUSY, claim.job_id, claim.state)
        except StoreFailed as exc:
            return self._store_failed(exc, claim)
        if not ok:
            return RunResult(Outcome.LEASE_LOST, claim.job_id, self._peek_state(claim.job_id))
        return RunResult(Outcome.QUARANTINED, claim.job_id, to_state)

    def _peek_state(self, job_id: str) -> str | None:
        try:
            return self.store.get(job_id).state
        except Exception:  # reporting only; the job's fate is already committed
            return None



def _described(exc: BaseException) -> str:
    """``Type: message`` for a step's exception, even one whose ``str()`` raises.

    An exception a step raised is stored as its job's last_error; one whose message cannot be
    read must still fail its job (as poison: it says nothing that would make a retry succeed),
    not escape the worker, which would re-run the paid step every time the lease expired.
    """
    name = type(exc).__name__
    try:
        return f"{name}: {exc}"
    except Exception as unreadable:
        return f"{name} (its message cannot be read: str() raised {type(unreadable).__name__})"


def _text(value: Any, how: Callable[[Any], str]) -> str:
    """``how(value)`` (``str`` or ``repr``) of an object a step returned, or a note that it cannot be
    read: the step's own object must not break the error message that reports its job."""
    try:
        return how(value)
    except Exception as unreadable:
        return f"<a {type(value).__name__} whose {how.__name__}() raised {type(unreadable).__name__}>"
