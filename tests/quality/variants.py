"""Planted bugs: variants of the reference engine, each broken in one way people really break it.

Each variant is an adapter the harness can target (``tests.quality.variants:SplitMemo`` ...). Its
docstring says what the bug is, what goes wrong in production, and which invariant catches it.
"""

from __future__ import annotations

import os
import random
from dataclasses import replace
from typing import Any

from chaos import ReferenceAdapter
from engine import Completion, SendReport, SqliteStore, StepContext, StepOutput, StepTimeout, Step, Worker, Workflow, reference_workflow

HERE = os.path.abspath(__file__)
INSERT_MEMO, INSERT_OUTBOX = SqliteStore.sql.INSERT_MEMO, SqliteStore.sql.INSERT_OUTBOX
INSERT_MEMO_OR_IGNORE = INSERT_MEMO.replace("INSERT INTO", "INSERT OR IGNORE INTO")


class _Variant(ReferenceAdapter):
    """A reference adapter whose planted code (this file) is traced for crash points too."""

    catches: tuple[str, ...] = ()
    families: tuple[str, ...] = ()

    def trace_paths(self) -> list[str]:
        return super().trace_paths() + [HERE]


def _memo_and_outbox(conn: Any, claim: Any, done: Completion, sql: str = INSERT_MEMO) -> None:
    conn.execute(sql, {"id": claim.job_id, "step": done.step, "output": done.output_json, "cost": done.cost_usd, "now": done.now})
    for kind, payload_json in done.effects.items():
        conn.execute(INSERT_OUTBOX, {"id": claim.job_id, "kind": kind, "payload": payload_json, "now": done.now})


# -- 1 -------------------------------------------------------------------------------------------
class _AdvanceThenMemoStore(SqliteStore):
    def complete(self, claim: Any, completion: Completion) -> bool:
        if not super().complete(claim, replace(completion, effects={}, write_memo=False)):
            return False
        with self._write() as conn:  # BUG: a second transaction
            if completion.write_memo:
                _memo_and_outbox(conn, claim, completion)
        return True


class SplitMemo(_Variant):
    """The memo committed separately from (after) the state advance.

    The state says "extracted" but the result is written by a second transaction. A crash between
    the two leaves a job that claims a step is done with nothing to show for it; the next step
    reads an input that does not exist. Caught by **progress-recorded**.
    """

    catches = ("progress-recorded",)
    families = ("clean",)

    def make_store(self, db_path: str) -> SqliteStore:
        return _AdvanceThenMemoStore(db_path)


# -- 2 -------------------------------------------------------------------------------------------
class EffectInStep(_Variant):
    """The effect sent from inside the step instead of through the outbox.

    The delivery happens before the step's commit. A crash before the commit, or a failure of the
    commit, leaves an effect in the world for a result the engine never recorded (and the step
    re-runs and sends again). Caught by **outbox-at-least-once** (an effect arrived without a
    committed outbox row).
    """

    catches = ("outbox-at-least-once",)
    families = ("clean",)

    def workflow(self, world: Any) -> Workflow:
        reference = reference_workflow(world.model, world.documents)

        def deliver_directly(ctx: Any) -> StepOutput:
            delivery = {"job": ctx.job_id, "fields": ctx.inputs["extract"]["fields"]}
            world.sender.send(f"{ctx.job_id}:delivery", "delivery", delivery)  # BUG: not via the outbox
            return StepOutput({"key": f"{ctx.job_id}:delivery"})

        steps = list(reference.steps[:-1]) + [
            Step("deliver", deliver_directly, working="delivering", done="delivered", failed="failed_deliver")
        ]
        return Workflow("reference", steps)


# -- 3 -------------------------------------------------------------------------------------------
def _mark_then_send(store: Any, sender: Any, *, clock: Any, rng: Any = None, batch_max: int = 100, **_: Any) -> SendReport:
    rows = store.due_outbox(now=clock.now(), limit=batch_max)
    store.mark_sent([row.id for row in rows], now=clock.now())  # BUG: marked before it is sent
    for row in rows:
        sender.send(row.key, row.kind, row.payload)
    return SendReport(len(rows), 0)


class MarkBeforeSend(_Variant):
    """The outbox row marked sent before it is sent.

    A crash between the mark and the send loses the effect for good: the row says "sent", so no
    sender will ever pick it up again. Caught by **outbox-at-least-once** (marked sent, never
    delivered).
    """

    catches = ("outbox-at-least-once",)
    families = ("sender",)

    def send_outbox_fn(self) -> Any:
        return _mark_then_send


# -- 4 -------------------------------------------------------------------------------------------
class _NoHeartbeatContext(StepContext):
    def heartbeat(self) -> None:
        return None  # BUG: the lease is never renewed while the step runs


class _NoHeartbeatWorker(Worker):
    context_class = _NoHeartbeatContext


class NoHeartbeat(_Variant):
    """No heartbeat while a step runs longer than the lease, with a second worker around.

    The lease lapses mid-call; the second worker takes the job over and pays for the same step
    again, though nothing failed. Caught by **bounded-spend**.
    """

    catches = ("bounded-spend",)
    families = ("lost-lease",)

    def make_worker(self, store: Any, workflow: Workflow, **kw: Any) -> Worker:
        return _NoHeartbeatWorker(store, workflow, lease_s=self.lease_s, threaded=False, **kw)


# -- 5 -------------------------------------------------------------------------------------------
CURRENT_TOKEN = "SELECT lease_token FROM job WHERE id = ?"


class _CheckpointFirstStore(SqliteStore):
    """An engine design that checkpoints each step's memo (and its outbox rows) in a transaction of
    its own, then advances the state: safe *only* because the memo is looked up on resume."""

    def complete(self, claim: Any, completion: Completion) -> bool:
        if completion.write_memo:
            with self._write() as conn:
                # Fenced like every write (this variant's one bug is the skipped lookup below).
                if conn.execute(CURRENT_TOKEN, (claim.job_id,)).fetchone()[0] != claim.token:
                    return False
                _memo_and_outbox(conn, claim, completion, INSERT_MEMO_OR_IGNORE)
        return super().complete(claim, replace(completion, effects={}, write_memo=False))

    def memo(self, job_id: str, step: str) -> Any:
        return None  # BUG: the memo is never looked up before a step runs


class SkipMemoLookup(_Variant):
    """The memo lookup skipped on resume.

    The reference engine commits memo and state advance together, so there the lookup is a second
    line of defence. This variant shows what it buys as soon as the two are written separately
    (a common design: checkpoint the step's output, then move the workflow on): a crash between
    them makes the resumed worker pay for a result that is already committed. Caught by
    **no-spend-after-memo**.
    """

    catches = ("no-spend-after-memo",)
    families = ("clean",)

    def make_store(self, db_path: str) -> SqliteStore:
        return _CheckpointFirstStore(db_path)


# -- 6 -------------------------------------------------------------------------------------------
class _RetryEverythingWorker(Worker):
    def _failed(self, claim: Any, step: Any, exc: BaseException) -> str:
        return super()._failed(claim, step, StepTimeout(str(exc)))  # BUG: every failure looks transient


class RetryPoison(_Variant):
    """A poison error (400, parse failure) retried like a transient one.

    Nothing will differ next time: each retry is another paid call for a guaranteed failure, five
    times over. Caught by **bounded-spend**.
    """

    catches = ("bounded-spend",)
    families = ("extract-400",)

    def make_worker(self, store: Any, workflow: Workflow, **kw: Any) -> Worker:
        return _RetryEverythingWorker(store, workflow, lease_s=self.lease_s, threaded=False, **kw)


# -- 7 -------------------------------------------------------------------------------------------
class _TopOfWindow(random.Random):
    """Every delay drawn at the top of its window: ``backoff_s`` becomes ``min(32, 2**attempt)``."""

    def uniform(self, a: float, b: float) -> float:
        return b  # BUG: no jitter


class NoJitter(_Variant):
    """Exponential backoff without jitter: the delay before retry k is exactly ``2**k`` seconds.

    Each job on its own backs off correctly, so every single-job test passes. But every job that
    failed during the same outage retries at the same instant, again and again: the recovery of
    the provider is met by the whole herd at once, and becomes the second outage. Caught by
    **retry-spread** in the ``retry-storm`` family, whose sixteen jobs fail three times each, and
    in a random history's ``Storm``, which lets sixteen jobs of its own meet the same faults.
    """

    catches = ("retry-spread",)
    families = ("retry-storm",)

    def make_worker(self, store: Any, workflow: Workflow, *, rng: random.Random, **kw: Any) -> Worker:
        return super().make_worker(store, workflow, rng=_TopOfWindow(rng.random()), **kw)


# Caught by a herd only: the matrix's retry-storm family, or a random history's Storm (sixteen jobs
# of its own; the history's pool of five is never a herd).
TIMING = (NoJitter,)


# -- fork mode only ------------------------------------------------------------------------------
UNMARK = "UPDATE outbox SET sent_at = NULL WHERE id = ?"


def _reserve_then_send(store: Any, sender: Any, *, clock: Any, rng: Any = None, batch_max: int = 100, **_: Any) -> SendReport:
    sent = 0
    for row in store.due_outbox(now=clock.now(), limit=batch_max):
        delivered = False
        try:
            store.mark_sent([row.id], now=clock.now())  # reserve the row so no other sender takes it
            sender.send(row.key, row.kind, row.payload)
            delivered = True
            sent += 1
        finally:
            if not delivered:  # BUG: "finally always runs" -- not when the process is killed
                with store._write() as conn:
                    conn.execute(UNMARK, (row.id,))
    return SendReport(sent, 0)


class ReleaseInFinally(_Variant):
    """An outbox row reserved by marking it sent, and un-marked in a ``finally`` if the send fails.

    The author trusted ``finally`` to always run. It does when an exception unwinds the stack, so
    the in-process kill mode (which abandons the worker by raising) sees nothing wrong. A SIGKILL
    runs no ``finally``: killed between the mark and the send, the row stays "sent" and the effect
    is never delivered. Caught by **outbox-at-least-once** in fork mode only: why fork is the
    default.
    """

    catches = ("outbox-at-least-once",)
    families = ("sender",)

    def send_outbox_fn(self) -> Any:
        return _reserve_then_send


PLANTED = (SplitMemo, EffectInStep, MarkBeforeSend, NoHeartbeat, SkipMemoLookup, RetryPoison)


# -- on the error paths a busy or full database opens, and a step whose attempts run out -----------
class _DiskErrorsEndTheLoop(Worker):
    def _store_failed(self, exc: Any, claim: Any) -> Any:
        raise exc  # BUG: a failed transaction escapes run_once, and the worker's loop dies with it


class DiskFullEndsTheLoop(_Variant):
    """A database failure (a full disk, an I/O error) let out of the worker's loop.

    Nothing of the failed transaction was written, so there was nothing to do but back off; instead
    the worker dies, and every worker that meets the full disk after it dies too. Caught by the
    ``disk-full`` family: the iteration raises (**raised**), and the gate fails before any crash.
    """

    catches = ("raised",)
    families = ("disk-full",)

    def make_worker(self, store: Any, workflow: Workflow, **kw: Any) -> Worker:
        return _DiskErrorsEndTheLoop(store, workflow, lease_s=self.lease_s, threaded=False, **kw)


class NoAttemptsLimit(_Variant):
    """A step retried for as long as it fails: no limit on its attempts.

    A dependency that never answers for this input (a document the provider always times out on)
    keeps the job retrying, and paying, forever; it is never parked for a person. Caught by the
    ``extract-outage`` family: the job never settles (**drains**) where it should be parked.
    """

    catches = ("drains",)
    families = ("extract-outage",)

    def make_worker(self, store: Any, workflow: Workflow, **kw: Any) -> Worker:
        return Worker(store, workflow, lease_s=self.lease_s, threaded=False, attempts_max=1_000_000, **kw)  # BUG


class _DamageEndsTheLoop(Worker):
    def _quarantine(self, claim: Any, why: str) -> Any:
        raise RuntimeError(why)  # BUG: a row the worker cannot read crashes it, on every restart


class DamagedRowEndsTheLoop(_Variant):
    """A stored row the worker cannot parse crashes it instead of being quarantined.

    The row is read again by every worker that claims the job: each one dies, and the job is never
    parked where a person would see it. Caught by the ``damaged-payload`` family: the iteration
    raises (**raised**).
    """

    catches = ("raised",)
    families = ("damaged-payload",)

    def make_worker(self, store: Any, workflow: Workflow, **kw: Any) -> Worker:
        return _DamageEndsTheLoop(store, workflow, lease_s=self.lease_s, threaded=False, **kw)


class IoErrorEndsTheLoop(DiskFullEndsTheLoop):
    """The same bug as :class:`DiskFullEndsTheLoop`, met where a disk fails a write (EIO): the
    step's COMMIT or the claim's. Caught by the ``commit-io-error`` and ``claim-io-error``
    families: the iteration raises (**raised**)."""

    families = ("commit-io-error", "claim-io-error")


class DamagedMemoEndsTheLoop(DamagedRowEndsTheLoop):
    """The same bug as :class:`DamagedRowEndsTheLoop`, met where a step loads a damaged memo row
    as its input. Caught by the ``damaged-memo`` family (**raised**)."""

    families = ("damaged-memo",)


class RetryBugs(RetryPoison):
    """:class:`RetryPoison` met by a step's own bug (a KeyError): retried five times at the model's
    price though it fails alike every time. Caught by the ``extract-bug`` family (**bounded-spend**)."""

    families = ("extract-bug",)


class DamagedStateEndsTheLoop(DamagedRowEndsTheLoop):
    """The same bug as :class:`DamagedRowEndsTheLoop`, met where a job's stored state is one the
    table does not know. Caught by the ``damaged-state`` family (**raised**)."""

    families = ("damaged-state",)


class _FreshClaimStore(SqliteStore):
    def claim(self, owner: str, **kw: Any) -> Any:
        claim = super().claim(owner, **kw)
        if claim is not None and claim.state == kw["starts"].get("pending"):
            claim = replace(claim, has_memos=False)  # BUG: a job that starts its first step is taken for a fresh one
        return claim


class RequeueRepays(_Variant):
    """A claim that takes every job starting its first step for a fresh one, with no memo rows.

    A job submitted a moment ago has none, so a store may be tempted to say so without looking; a
    job a person requeued to its first step has them all: the worker runs that step again, and its
    memo row's insert meets the one already there, an IntegrityError that escapes the worker's loop
    on every claim of the job. Caught by the ``requeued-after-quarantine`` family (**raised**); the
    families without a requeue hold (``clean``, ``resume``).
    """

    catches = ("raised",)
    families = ("requeued-after-quarantine",)
    holds_in = ("clean", "resume")

    def make_store(self, db_path: str) -> SqliteStore:
        return _FreshClaimStore(db_path)


class _UncheckedCostWorker(Worker):
    def _encode(self, step: Any, route: Any, output: Any) -> Any:
        output_json, effects, _ = super()._encode(step, route, replace(output, cost_usd=0.0))
        return output_json, effects, output.cost_usd  # BUG: the price is stored as the API answered it


class UncheckedCost(_Variant):
    """A step's price stored as the billing API answered it, unchecked.

    A price the API left out (null) meets the store's NOT NULL constraint inside the completion's
    transaction: an IntegrityError escapes the worker's loop, on every worker that claims the job.
    Caught by the ``extract-price-missing`` family (**raised**).
    """

    catches = ("raised",)
    families = ("extract-price-missing",)

    def make_worker(self, store: Any, workflow: Workflow, **kw: Any) -> Worker:
        return _UncheckedCostWorker(store, workflow, lease_s=self.lease_s, threaded=False, **kw)


class UncheckedCredit(UncheckedCost):
    """The same unchecked price, met by a billing API that answers a credit (a negative price).

    The store takes it: the memo row records a cost below zero, the job delivers as the baseline
    does, and the cost report carries a refund nobody gave. Caught by the ``extract-price-negative``
    family (**cost-recorded**).
    """

    catches = ("cost-recorded",)
    families = ("extract-price-negative",)


class _OwnTimeoutIsPoisonWorker(Worker):
    def _call(self, step: Any, ctx: Any, timeout_s: float) -> Any:
        try:
            return super()._call(step, ctx, timeout_s)
        except StepTimeout as exc:
            if self._runner is not None:
                raise  # the step's own timeout (its call raised it)
            raise RuntimeError(f"gave up waiting: {exc}") from None  # BUG: the worker's own timeout is an unknown error: poison


class OwnTimeoutIsPoison(_Variant):
    """A worker that gives up a hung step with an error of its own that the retry rules do not know.

    Unknown errors are poison, so a call that merely hung once parks its job for a person instead of
    being retried; a timeout the step raises itself is still retried, so no family whose call fails
    fast meets it. Caught by the ``hung-call`` family: without any other fault the job does not end
    as the family expects (**baseline**).
    """

    catches = ("baseline",)
    families = ("hung-call",)

    def make_worker(self, store: Any, workflow: Workflow, **kw: Any) -> Worker:
        return _OwnTimeoutIsPoisonWorker(store, workflow, **{"lease_s": self.lease_s, "monotonic": kw["clock"].now, **kw})


ERROR_PATHS = (DiskFullEndsTheLoop, NoAttemptsLimit, DamagedRowEndsTheLoop, IoErrorEndsTheLoop, DamagedMemoEndsTheLoop, RetryBugs,
               DamagedStateEndsTheLoop, RequeueRepays, UncheckedCost, UncheckedCredit, OwnTimeoutIsPoison)


# -- caught only when workers overlap (pauses, two-level interleavings) ---------------------------
from engine import Claim  # noqa: E402

FENCED_MOVE, COUNT_RECLAIM = SqliteStore.sql.FENCED_MOVE, SqliteStore.sql.COUNT_RECLAIM

PAYLOAD = "(SELECT payload FROM job_payload WHERE job_payload.job_id = job.id) AS payload"  # as the engine's claim reads it
STEAL_ANY = (
    "UPDATE job SET lease_owner = :owner, lease_until = :until, next_run_at = :until, "
    "lease_token = lease_token + 1, updated = :now "
    "WHERE id = (SELECT id FROM job WHERE next_run_at IS NOT NULL ORDER BY next_run_at LIMIT 1) "
    f"RETURNING id, state, {PAYLOAD}, attempts, lease_token"
)
PICK = "SELECT id FROM job WHERE next_run_at <= ? ORDER BY next_run_at LIMIT 1"
TAKE = (
    "UPDATE job SET lease_owner = :owner, lease_until = :until, next_run_at = :until, "
    "lease_token = lease_token + 1, updated = :now WHERE id = :id "
    f"RETURNING id, state, {PAYLOAD}, attempts, lease_token"
)


def _start(conn: Any, row: Any, now: float, lease_s: float, starts: Any) -> Claim:
    state, token, attempts = row["state"], row["lease_token"], row["attempts"]
    ident = {"id": row["id"], "token": token, "now": now}
    if state in starts:
        conn.execute(FENCED_MOVE, {**ident, "to": starts[state], "from": state})
        state = starts[state]
    else:
        conn.execute(COUNT_RECLAIM, {**ident, "state": state})
        attempts += 1
    return Claim(row["id"], state, row["payload"], attempts, token, now + lease_s)


class _StealingStore(SqliteStore):
    def claim(self, owner: str, *, now: float, lease_s: float, starts: Any) -> Any:
        with self._write() as conn:
            row = conn.execute(STEAL_ANY, {"owner": owner, "until": now + lease_s, "now": now}).fetchone()  # BUG
            return None if row is None else _start(conn, row, now, lease_s, starts)


class ClaimIgnoresLiveLease(_Variant):
    """A claim that takes any unfinished job, whether or not its lease is still valid.

    With one worker nothing is wrong. With two, the second takes the job from under the first,
    which is alive and working, and the same step is paid for twice. Caught by the pause matrix
    (another worker runs while the first is frozen with its lease valid): **bounded-spend**.
    """

    catches = ("bounded-spend",)
    families = ("clean",)
    faults = ("pause",)

    def make_store(self, db_path: str) -> SqliteStore:
        return _StealingStore(db_path)


class _CheckThenActStore(SqliteStore):
    def claim(self, owner: str, *, now: float, lease_s: float, starts: Any) -> Any:
        picked = self.conn.execute(PICK, (now,)).fetchone()  # BUG: read outside the write transaction
        if picked is None:
            return None
        with self._write() as conn:
            row = conn.execute(TAKE, {"owner": owner, "until": now + lease_s, "now": now, "id": picked[0]}).fetchone()
            return None if row is None else _start(conn, row, now, lease_s, starts)


class UnguardedClaim(_Variant):
    """A claim whose SELECT and UPDATE are two statements, the UPDATE not re-checking the lease.

    Between the two, another worker can claim the job and start paying for its step; the UPDATE
    then takes the job from under it. Only an interleaving of two workers (one frozen between its
    SELECT and its UPDATE, the other frozen mid-step) shows it: **bounded-spend**.
    """

    catches = ("bounded-spend",)
    families = ("clean",)
    faults = ("interleave",)

    def make_store(self, db_path: str) -> SqliteStore:
        return _CheckThenActStore(db_path)


class _UnfencedStore(SqliteStore):
    def complete(self, claim: Any, completion: Completion) -> bool:
        current = self.conn.execute("SELECT lease_token FROM job WHERE id = ?", (claim.job_id,)).fetchone()[0]
        return super().complete(replace(claim, token=current), completion)  # BUG: the writer's token is not checked


class NoFencing(_Variant):
    """A step completion guarded by the job's state but not by the writer's lease token.

    A worker frozen past its lease wakes up while its replacement is mid-step, finds the job in
    the state it left it in, and commits on top of the replacement's work: the zombie write that
    fencing tokens exist for. Caught by two-level interleavings: **fenced-writes**.
    """

    catches = ("fenced-writes",)
    families = ("clean",)
    faults = ("interleave",)

    def make_store(self, db_path: str) -> SqliteStore:
        return _UnfencedStore(db_path)


OVERLAP = (ClaimIgnoresLiveLease, UnguardedClaim, NoFencing)


class _BlindHumanStore(SqliteStore):
    def human_move(self, job_id: str, *, from_state: str, to_state: str, next_run_at: Any, now: float) -> bool:
        with self._write() as conn:
            moved = conn.execute(  # BUG: no `AND state = :from`: whatever the job is doing now is overwritten
                "UPDATE job SET state = :to, attempts = 0, next_run_at = :next_run_at, lease_owner = NULL, "
                "lease_until = NULL, updated = :now WHERE id = :id",
                {"id": job_id, "to": to_state, "next_run_at": next_run_at, "now": now},
            ).rowcount
        return moved == 1


class NoCompareAndSwap(_Variant):
    """A transition written without its compare-and-swap guard (``WHERE state = :from``).

    Worker writes are also fenced by the lease token, which would mask a missing state guard
    there; a person's action has no lease, so the state guard is all that stands between a cancel
    and a worker that claimed the job a moment after the person looked at it. The job is
    cancelled under the worker's feet (or after it finished). Caught by the pause matrix (the
    person frozen between reading and writing while a worker runs): **legal-transitions**.
    """

    catches = ("legal-transitions",)
    families = ("cancel-race",)
    faults = ("pause",)

    def make_store(self, db_path: str) -> SqliteStore:
        return _BlindHumanStore(db_path)


OVERLAP = OVERLAP + (NoCompareAndSwap,)


# -- two independent bugs in one engine ------------------------------------------------------------
class NoHeartbeatAndMarkBeforeSend(NoHeartbeat, MarkBeforeSend):
    """Two planted bugs at once: the worker never heartbeats (:class:`NoHeartbeat`) and the sender
    marks a row sent before it sends it (:class:`MarkBeforeSend`). Each is caught by its own
    invariant, **bounded-spend** and **outbox-at-least-once**: an exploration must report both,
    and, told to ignore one, still find the other."""

    catches = NoHeartbeat.catches + MarkBeforeSend.catches
    families = NoHeartbeat.families + MarkBeforeSend.families


class InlineSteps(ReferenceAdapter):
    """The reference engine with its steps run inline (``Worker(threaded=False)``), not on the step thread."""

    threaded = False
