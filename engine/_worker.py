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

import json
import queue
import random
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

from ._clock import Clock, SystemClock
from ._errors import DamagedRow, InvalidInput, LeaseLost, StepTimeout, StoreBusy, StoreFailed, ValidationFailed
from ._retry import ATTEMPTS_MAX, BACKOFF_S_MAX, backoff_s, classify
from ._inputs import check_text, dumps, finite_number
from ._store import _PAYLOAD_FIX, Claim
from ._workflow import NEEDS_HUMAN, NeedsHuman, Step, StepOutput, Workflow

__all__ = ["Worker", "StepContext", "RunResult"]

LEASE_S_DEFAULT = 120.0
# A heartbeat writes only when it would extend the lease by at least this fraction of it: a step
# may call ``ctx.heartbeat()`` as often as it likes without a commit each time, and every
# heartbeat that is not a no-op pushes the lease as far as it may go.
HEARTBEAT_MIN_EXTENSION_FRACTION = 1 / 8
# A step completion renews the lease for the next step unless it was taken or renewed less than
# this long ago (capped at half the gap between the lease and the longest step timeout, so the next
# step always starts with more lease left than its timeout).
LEASE_RENEW_SLACK_S_MAX = 1.0
# The threaded runner wakes 4 times per heartbeat interval (or per timeout, if shorter) to check the
# timeout and heartbeat. As the timeout is shorter than the lease, a step reaches it in fewer than
# 12 waits; this bound only stops the loop if the monotonic clock itself stalls.
WAITS_MAX = 10_000
# Worker.run backs off after a database failure (disk full, I/O error): the idle sleep doubles
# with every failure in a row, up to this many seconds, so a failing disk is not hammered.
STORE_BACKOFF_S_MAX = 30.0


class _ClaimInputs:
    """The outputs of earlier steps that the steps of one claim receive as ``ctx.inputs``.

    The first step of a claim reads them from the store. If there were none (a job claimed fresh
    at its first step: the common case), the later steps of the same claim are given the JSON this
    worker itself committed instead of reading it back: while the claim's lease holds, only this
    worker can add memo rows for the job (each memo insert is part of a completion fenced by its
    token), and memo rows never change. Each step still gets freshly parsed objects, exactly as a
    read would give. After a memo was skipped, or if earlier memos existed, every step reads.
    """

    __slots__ = ("_texts",)

    def __init__(self) -> None:
        self._texts: dict[str, str] | None = None  # None: read from the store

    def load(self, store: Any, job_id: str) -> dict[str, Any]:
        if self._texts is None:
            inputs = store.memos(job_id)
            self._texts = None if inputs else {}
            return inputs
        return {name: json.loads(text) for name, text in self._texts.items()}

    def committed(self, step: str, output_json: str) -> None:
        if self._texts is not None:
            self._texts[step] = output_json

    def forget(self) -> None:
        self._texts = None


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
        return self._worker.clock.now()

    @property
    def lease_until(self) -> float:
        return self._lease_until

    def heartbeat(self) -> None:
        """Renew the lease; raise :class:`LeaseLost` if another worker took the job over.

        Renewal stops at the step's deadline, so a hung step eventually frees its job.
        """
        worker = self._worker
        now = worker.clock.now()
        if now >= self.deadline:
            return
        until = min(now + worker.lease_s, self.deadline + worker.lease_s)
        if until - self._lease_until < worker.lease_s * HEARTBEAT_MIN_EXTENSION_FRACTION:
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
    """What one :meth:`Worker.run_once` did.

    ``outcome`` is one of: ``idle`` (nothing due), ``busy`` (database locked; try later),
    ``unavailable`` (the database failed: disk full, I/O error; back off, try later), ``done``
    (the job reached its final state), ``advanced`` (progress, job released for later),
    ``retry`` (a retryable failure, backoff scheduled), ``failed`` (a failed state),
    ``needs_human``, ``quarantined`` (a damaged row: the job was parked in a failed state),
    ``lease_lost`` (another worker took over; nothing written).

    ``error`` is what the database reported when the outcome is ``unavailable``, so that a loop
    that gives up can say why.
    """

    outcome: str
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
    """

    # What steps receive; a subclass may extend it (the harness swaps it to plant bugs).
    context_class = StepContext

    def __init__(
        self,
        store: Any,
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
    ) -> None:
        lease_s = finite_number("lease_s", lease_s)
        if lease_s <= 0:
            raise InvalidInput(f"lease_s={lease_s!r} must be > 0")
        if step_timeout_s is not None:
            finite_number("step_timeout_s", step_timeout_s)
        if isinstance(attempts_max, bool) or not isinstance(attempts_max, int):
            raise InvalidInput(f"attempts_max={attempts_max!r} must be an integer >= 1")
        backoff_s_max = finite_number("backoff_s_max", backoff_s_max, minimum=0.0)
        check_text(worker_id, f"worker_id {worker_id!r}")  # it is stored as the lease's owner
        timeout = step_timeout_s if step_timeout_s is not None else lease_s * 0.75
        longest_timeout = 0.0
        for step in workflow.steps:
            step_timeout = step.timeout_s if step.timeout_s is not None else timeout
            longest_timeout = max(longest_timeout, step_timeout)
            if not 0 < step_timeout < lease_s:
                raise InvalidInput(
                    f"step {step.name!r} timeout {step_timeout}s must be > 0 and shorter than the lease "
                    f"({lease_s}s), or a call could outlive the lease and run twice; lower the timeout or raise lease_s"
                )
        if attempts_max < 1:
            raise InvalidInput(f"attempts_max={attempts_max!r} must be >= 1")
        self.store = store
        self.workflow = workflow
        self.worker_id = worker_id
        self.clock: Clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.lease_s = float(lease_s)
        self.step_timeout_s = float(timeout)
        self.attempts_max = attempts_max
        self.backoff_s_max = backoff_s_max
        self.threaded = threaded
        self.heartbeat_every_s = self.lease_s / 3
        self.renew_slack_s = min(LEASE_RENEW_SLACK_S_MAX, (self.lease_s - longest_timeout) / 2)
        self._db_lock = threading.Lock()
        self._runner: _StepThread | None = None
        self._starts = {
            state: workflow.next_step(state).working_state  # type: ignore[union-attr]
            for state in workflow.ready_states
        }

    # -- the loop -----------------------------------------------------------------------------
    def run_once(self) -> RunResult:
        """Claim one job and drive it as far as it goes; see the module docstring."""
        try:
            claim = self.store.claim(self.worker_id, now=self.clock.now(), lease_s=self.lease_s, starts=self._starts)
        except StoreBusy:
            return RunResult("busy")
        except StoreFailed as exc:
            return self._store_failed(exc, None)
        if claim is None:
            return RunResult("idle")
        ran = skipped = 0
        outcome = "lease_lost"
        inputs = _ClaimInputs()
        for _ in range(len(self.workflow.steps)):  # a job passes each step at most once per claim
            step = self.workflow.step_for_working(claim.state)
            if step is None:
                return self._quarantine(claim, f"state {claim.state!r} is not a working state of workflow {self.workflow.name!r}")
            try:
                if claim.attempts >= self.attempts_max:
                    outcome = self._give_up(claim, step)
                    break
                outcome, nxt, was_run = self._advance(claim, step, inputs)
            except StoreBusy:
                return RunResult("busy", claim.job_id, claim.state, ran, skipped)
            except StoreFailed as exc:
                # Nothing of the failed transaction was written: the job keeps its state and this
                # worker's lease, and is taken up again (by anyone) once the lease expires.
                return self._store_failed(exc, claim)
            except DamagedRow as exc:
                return self._quarantine(claim, str(exc))
            ran += was_run
            skipped += not was_run and outcome in ("advanced", "done")
            if nxt is None:
                break
            claim = nxt
        # "done" means this worker's own fenced commit just moved the job to the final state, so it
        # need not read the row back; every other outcome reports what the database says now.
        state = self.workflow.final_state if outcome == "done" else self._peek_state(claim.job_id)
        return RunResult(outcome, claim.job_id, state, ran, skipped)

    def run(self, *, idle_sleep_s: float = 0.2, iterations_max: int | None = None, stop: threading.Event | None = None) -> int:
        """Loop :meth:`run_once` until ``stop`` is set (or ``iterations_max``); returns jobs touched."""
        touched = 0
        iteration = 0
        failures = 0  # database failures in a row
        while (stop is None or not stop.is_set()) and (iterations_max is None or iteration < iterations_max):
            iteration += 1
            result = self.run_once()
            failures = failures + 1 if result.outcome == "unavailable" else 0
            if failures:
                delay_s = min(STORE_BACKOFF_S_MAX, idle_sleep_s * 2.0 ** min(failures, 16))
                self.clock.sleep(delay_s * (0.5 + self.rng.random()))
            elif result.outcome in ("idle", "busy"):
                self.clock.sleep(idle_sleep_s * (0.5 + self.rng.random()))
            else:
                touched += 1
        return touched

    # -- one step -------------------------------------------------------------------------------
    def _advance(self, claim: Claim, step: Step, inputs: _ClaimInputs | None = None) -> tuple[str, Claim | None, bool]:
        """Run (or skip via memo) one step and commit. Returns (outcome, claim to continue, ran)."""
        inputs = inputs or _ClaimInputs()
        memo = self.store.memo(claim.job_id, step.name)
        if memo is not None:
            inputs.forget()
            committed = self._commit(claim, step, StepOutput(memo.output, memo.cost_usd), write_memo=False)
            return committed[0], committed[1], False
        try:
            payload = json.loads(claim.payload_json)
        except ValueError as exc:
            raise DamagedRow(claim.job_id, "payload", str(exc), _PAYLOAD_FIX) from None
        now = self.clock.now()
        timeout = step.timeout_s if step.timeout_s is not None else self.step_timeout_s
        ctx = self.context_class(self, claim, step, payload, inputs.load(self.store, claim.job_id), deadline=now + timeout)
        try:
            raw = self._call(step, ctx, timeout)
        except LeaseLost:
            return "lease_lost", None, True
        except Exception as exc:  # a step's failure is data, not a crash of the worker
            return self._failed(claim, step, exc), None, True
        if isinstance(raw, NeedsHuman):
            if not step.review:
                raise InvalidInput(f"step {step.name!r} returned NeedsHuman but is not a review step; declare Step(review=True)")
            return self._park(claim, step, NEEDS_HUMAN, f"{step.name}: needs review: {raw.reason}", None), None, True
        output = raw if isinstance(raw, StepOutput) else StepOutput(raw)
        try:
            encoded = self._encode(step, output)
        except InvalidInput as exc:
            # What the step returned cannot be stored: it will return the same next time, so it
            # fails as poison after this one call, saying why, instead of escaping run_once (the
            # job would then be re-run and paid for until its lease had expired five times).
            return self._failed(claim, step, ValidationFailed(str(exc))), None, True
        committed = self._commit(claim, step, output, write_memo=True, inputs=inputs, encoded=encoded)
        return committed[0], committed[1], True

    def _call(self, step: Step, ctx: StepContext, timeout_s: float) -> Any:
        if not self.threaded:
            return step.fn(ctx)
        runner = self._runner
        if runner is None or not runner.alive():  # first call, after a timeout, or after a fork
            runner = self._runner = _StepThread(self.worker_id)
            weakref.finalize(self, runner.stop)
        runner.submit(step.fn, ctx)
        started = time.monotonic()
        wait_s = min(self.heartbeat_every_s, timeout_s) / 4
        for _ in range(WAITS_MAX):
            done = runner.result(wait_s)
            if done is not None:
                kind, value = done
                if kind == "error":
                    raise value
                return value
            if time.monotonic() - started >= timeout_s:
                # The thread is abandoned: it may finish its call, but it can write nothing,
                # because every write goes through this worker and is fenced by the lease token.
                # The next step gets a new thread; this one exits once its call returns.
                self._runner = None
                runner.stop()
                raise StepTimeout(f"step {step.name!r} exceeded its {timeout_s}s timeout")
            ctx.heartbeat()
        raise AssertionError(f"step {step.name!r}: waited {WAITS_MAX} times without reaching its timeout")

    @staticmethod
    def _encode(step: Step, output: StepOutput) -> tuple[str, dict[str, str]]:
        """The JSON of a step's output and effects; :class:`InvalidInput` if they cannot be stored."""
        finite_number(f"cost_usd of step {step.name!r}", output.cost_usd, minimum=0.0)
        output_json = dumps(output.output, what=f"output of step {step.name!r}")
        effects = {kind: dumps(p, what=f"effect {kind!r} of step {step.name!r}") for kind, p in output.effects.items()}
        return output_json, effects

    def _commit(
        self,
        claim: Claim,
        step: Step,
        output: StepOutput,
        *,
        write_memo: bool,
        inputs: _ClaimInputs | None = None,
        encoded: tuple[str, dict[str, str]] | None = None,
    ) -> tuple[str, Claim | None]:
        undeclared = set(output.effects) - set(step.effects) if output.effects else ()
        if undeclared:  # a bug in the workflow's code, not in this job: it is raised, not parked
            raise InvalidInput(
                f"step {step.name!r} emitted effects {sorted(undeclared)} it does not declare; "
                f"add them to Step(effects=...) (declared: {list(step.effects)})"
            )
        output_json, effects = encoded if encoded is not None else self._encode(step, output)
        now = self.clock.now()
        nxt = self.workflow.next_step(step.done_state)
        self.workflow.check(step.working_state, step.done_state)
        if nxt is not None:
            self.workflow.check(step.done_state, nxt.working_state)
        final = step.done_state == self.workflow.final_state
        # Renew the lease for the next step, unless it was taken or renewed within renew_slack_s:
        # the next step then still starts with more lease left than its timeout, and rewriting the
        # lease (and with it the claim index) in every completion would cost a page write for nothing.
        if claim.lease_until - now > self.lease_s - self.renew_slack_s:
            lease_until = claim.lease_until
        else:
            lease_until = now + self.lease_s
        with self._db_lock:
            ok = self.store.complete(
                claim,
                step=step.name,
                from_state=step.working_state,
                done_state=step.done_state,
                output_json=output_json,
                cost_usd=float(output.cost_usd),
                effects=effects,
                next_state=None if nxt is None else nxt.working_state,
                release_at=None if final else now,
                lease_until=lease_until,
                result_json=output_json if final else None,
                write_memo=write_memo,
                now=now,
            )
        if not ok:
            return "lease_lost", None
        if inputs is not None:
            inputs.committed(step.name, output_json)
        if nxt is None:
            return ("done" if final else "advanced"), None
        # Built directly: dataclasses.replace is several times slower, and this runs on every step.
        return "advanced", Claim(claim.job_id, nxt.working_state, claim.payload_json, 0, claim.token, lease_until)

    # -- leaving a step without a result ---------------------------------------------------------
    def _failed(self, claim: Claim, step: Step, exc: BaseException) -> str:
        retryable, retry_after_s = classify(exc, step.retry_on)
        error = f"{step.name}: {type(exc).__name__}: {exc}"
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

    def _give_up(self, claim: Claim, step: Step) -> str:
        error = (
            f"{step.name}: lease expired {claim.attempts} times during this step (a worker died or hung "
            "each time); parked so it cannot take more workers down"
        )
        return self._park(claim, step, step.failed_state or NEEDS_HUMAN, error, None, attempts=claim.attempts)

    def _park(self, claim: Claim, step: Step, to_state: str, error: str | None, next_run_at: float | None, *, attempts: int | None = None) -> str:
        self.workflow.check(step.working_state, to_state)
        with self._db_lock:
            ok = self.store.park(
                claim,
                from_state=step.working_state,
                to_state=to_state,
                attempts=claim.attempts if attempts is None else attempts,
                error=error,
                next_run_at=next_run_at,
                now=self.clock.now(),
            )
        if not ok:
            return "lease_lost"
        if to_state == NEEDS_HUMAN:
            return "needs_human"
        return "retry" if next_run_at is not None else "failed"

    # -- what the machine did ---------------------------------------------------------------------
    def _store_failed(self, exc: StoreFailed, claim: Claim | None) -> RunResult:
        """The database failed (disk full, I/O error): report it and let the loop back off.

        Never raised out of the loop: nothing of the failed transaction was written, the job
        keeps its state and lease, and the next iteration (or another worker, once the lease
        expires) takes it up again when the disk recovers.
        """
        if claim is None:
            return RunResult("unavailable", error=str(exc))
        return RunResult("unavailable", claim.job_id, claim.state, error=str(exc))

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
            with self._db_lock:
                ok = self.store.park(
                    claim,
                    from_state=claim.state,
                    to_state=to_state,
                    attempts=claim.attempts,
                    error=f"quarantined: {why}",
                    next_run_at=None,
                    now=self.clock.now(),
                )
        except StoreBusy:
            return RunResult("busy", claim.job_id, claim.state)
        except StoreFailed as exc:
            return self._store_failed(exc, claim)
        if not ok:
            return RunResult("lease_lost", claim.job_id, self._peek_state(claim.job_id))
        return RunResult("quarantined", claim.job_id, to_state)

    def _peek_state(self, job_id: str) -> str | None:
        try:
            return self.store.get(job_id).state
        except Exception:  # reporting only; the job's fate is already committed
            return None
