"""After a fault: what must hold at once, then a recovery that drains the system, then the checks.

Right after the fault the harness checks the invariants that must hold at every moment, moves
the fake clock past the dead worker's lease, and drains the system in a fresh process, one that
never ran the doomed iteration, as a real restart is (a worker and the outbox sender until
nothing is due, time moving past every backoff); then it checks the whole catalog at rest,
including that the fault did not change the outcome (``same-outcome``), with
:mod:`chaos.core.verdict`. The recovering workers are the adapter's ``recovery`` model's
(:mod:`chaos.core.recovery`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Collection

from engine import NO_PROGRESS

from chaos.core.context import close_quietly
from chaos.core.invariants import Violation, check, idempotent_submit, raised
from chaos.core.iteration import one_iteration
from chaos.core.recovery import recovering_workers, recovery_wait_s
from chaos.core.process import Exit, fork
from chaos.core.scenario import DOOMED, RECOVERY_RNG_SCOPE, Family, Outcome, Run, arm_sticky
from chaos.core.verdict import checked, compared

__all__ = [
    "RECOVERY_ROUNDS_MAX", "PACED_ROUNDS_MAX", "STILL_ROUNDS_MAX", "ITERATIONS_PER_ROUND_MAX", "BACKOFF_JUMP_S", "RECOVERING", "after_fault",
    "recover_and_check", "recovery_key", "drain", "settle", "due_at", "next_due_at",
]

RECOVERY_ROUNDS_MAX = 40
# A paced drain moves the clock once per retry that falls due: a storm of 20 jobs retried four
# times each needs about 80 rounds, and this bound leaves room for leases and outbox rows too.
PACED_ROUNDS_MAX = 400
# A paced drain ends, unsettled, after this many rounds in a row that changed nothing with nothing
# due later: as many as an unpaced drain runs in all.
STILL_ROUNDS_MAX = RECOVERY_ROUNDS_MAX
ITERATIONS_PER_ROUND_MAX = 50
BACKOFF_JUMP_S = 33.0
RECOVERING = "w-recover"  # a new worker that recovers the doomed one's work


def after_fault(run: Run, family: Family, point_id: str, exit_kind: Exit, interrupted: Callable[[Any], Counter],
                 problems: list[Violation] | None = None) -> Outcome:
    """Check what must hold right after the fault, then recover in a fresh child and check the
    rest (the fault's own ``problems`` first, each violation once). ``interrupted`` names the steps
    the fault interrupted, given the snapshot read right after it."""
    snapshot = run.adapter.inspect(run.db)
    interruptions = interrupted(snapshot)
    after = check(run.evidence(family.submitted, interruptions, snapshot), at_rest=False)
    outcome = recover_and_check(run, family, interruptions, point_id, exit_kind)
    seen = {str(v) for v in outcome.violations}
    outcome.violations = (problems or []) + [v for v in after if str(v) not in seen] + outcome.violations
    return outcome


def recover_and_check(run: Run, family: Family, interruptions: Counter, point_id: str, exit_kind: str, *,
                       compare: bool = True) -> Outcome:
    """Let time pass every lease and backoff, drain in a fresh child, then check everything, and
    (with ``compare``) that the outcome is the baseline's."""
    run.clock.advance(recovery_wait_s(run.adapter))
    ended = fork(lambda: drain(run), "the recovery (a fresh process)").wait()
    if ended.exit is Exit.FINISHED:
        drained = ended.value
    else:
        detail = ended.error or f"its process ended: {ended.exit} (status {ended.status})"
        drained = ([raised("the recovery, in a fresh process", detail)], [])
    outcome = checked(run, family.submitted, interruptions, point_id, exit_kind, drained)
    if compare:
        outcome.violations += compared(family, outcome, run.adapter)
    return outcome


def recovery_key(family: Family) -> tuple[Any, ...]:
    """What a recovery (:func:`drain`) and the checks after it depend on besides the files and the
    clock it starts from, and the family's baseline (see :func:`compared`): the jobs submitted again,
    the faults that stay (sticky), the workers that restart, the pace of time. Two families with
    the same key whose kills leave the same content end alike, so the crash matrix runs one of
    them (a recovery's workers seed their random generators alike in every family)."""
    scenario = family.scenario
    return (
        tuple(sorted(family.submitted.items())),
        tuple(repr(f) for f in scenario.faults if f.sticky),
        tuple(action for action in scenario.setup if action.startswith("claim:")),
        scenario.paced,
    )


def drain(run: Run, *, advance: bool = False) -> tuple[list[Violation], list[Violation]]:
    """In a child: the faults stop (a poison input stays poison), a worker and the sender drain
    the system, then every submit is repeated. Returns the recovery's crashes and the
    idempotent-submit violations.

    The baseline calls it in the process that ran the iteration (without any fault, nothing
    restarts), with ``advance``: the time a recovery waits passes first, as the harness lets it
    pass before a recovery (:func:`chaos.core.recovery.recovery_wait_s`).

    The recovering workers are the adapter's ``recovery`` model's: one new worker, or (restart)
    every worker of the family that died, the doomed one last, each under its own identity.
    """
    run.world.disarm()
    run.world.during_slow = None
    run.rng_scope = RECOVERY_RNG_SCOPE
    arm_sticky(run)
    if advance:
        run.clock.advance(recovery_wait_s(run.adapter))
    dead = [action.partition(":")[2] for action in run.scenario.setup if action.startswith("claim:")] + [DOOMED]
    *first, last = recovering_workers(run.adapter, dead, RECOVERING)

    def restart(session: Any, n: int) -> Any:
        close_quietly(session)
        return run.session(last if last != RECOVERING else f"{RECOVERING}{n}")

    def inspect() -> Any:
        return run.adapter.inspect(run.db)

    for worker in first:  # a worker restarted takes its own work back, then the last one drains
        session = run.session(worker)
        for _ in range(ITERATIONS_PER_ROUND_MAX):
            if one_iteration(run.adapter, session)() in NO_PROGRESS:
                break
    session, crashes, _ = settle(run.session(last), inspect, run.adapter.settled_states(), run.clock, restart=restart,
                                 paced=run.scenario.paced)
    resubmitted = idempotent_submit(session, inspect, run.submitted, run.target.conflict_errors, run.target.submit_conflict)
    run.close()
    return crashes, resubmitted


def settle(session: Any, inspect: Callable[[], Any], settled: frozenset[str], clock: Any, *,
           restart: Callable[[Any, int], Any] | None = None, gave_up: Collection[str] = NO_PROGRESS,
           paced: bool = False) -> tuple[Any, list[Violation], bool]:
    """Run ``session``'s worker and outbox sender until every job is settled with no lease held
    and no outbox row unsent, moving ``clock`` past the latest lease, backoff or outbox row still
    pending (at least :data:`BACKOFF_JUMP_S`) whenever nothing is due now; ``paced``, only to the
    first of them (see :class:`Scenario`), for at most :data:`PACED_ROUNDS_MAX` rounds.

    A worker iteration that answers one of ``gave_up`` ends a round. With ``restart``, an
    exception is a ``drains`` violation and ``restart(session, n)`` gives the n-th successor;
    without, it propagates. Returns the last session, the violations, and whether it settled.
    """
    crashes: list[Violation] = []
    still, seen = 0, None  # paced rounds in a row that changed nothing and had nothing due; the last round's view
    for _ in range(PACED_ROUNDS_MAX if paced else RECOVERY_ROUNDS_MAX):
        try:
            for _ in range(ITERATIONS_PER_ROUND_MAX):
                if session.run_once() in gave_up:
                    break
            for _ in range(ITERATIONS_PER_ROUND_MAX):
                if not session.send_outbox():
                    break
        except Exception as exc:  # the engine's loop must survive recovery; report, then go on
            if restart is None:
                raise
            crashes.append(Violation("drains", f"the recovering worker raised {type(exc).__name__}: {exc}"))
            session = restart(session, len(crashes))
        snapshot = inspect()
        waiting = [j for j in snapshot.jobs.values() if j.state not in settled or j.lease_owner is not None]
        if not waiting and all(row.sent_at is not None for row in snapshot.outbox):
            return session, crashes, True
        now = clock.now()
        first = next_due_at(waiting, snapshot.outbox, now) if paced else None
        if first is not None:
            clock.advance(first - now)
        else:
            clock.advance(max(BACKOFF_JUMP_S, due_at(waiting, snapshot.outbox) - now + 1))
        # A paced drain with nothing due later, whose round changed nothing, has become an unpaced
        # one (each round jumps the clock past every lease and backoff): it gets an unpaced drain's
        # rounds, not the storm's. A job stuck for good (a message locked by a dead consumer)
        # would otherwise cost PACED_ROUNDS_MAX rounds, each reading the engine's rows, and could
        # outlast the scenario's bound: a 'hangs' finding where the truth is a job that never drains.
        view = (snapshot.jobs, len(snapshot.transitions), snapshot.memos, len(snapshot.memo_changes), snapshot.outbox)
        still, seen = (still + 1 if first is None and view == seen else 0), view
        if paced and still >= STILL_ROUNDS_MAX:
            break
    return session, crashes, False


def due_at(waiting: Any, outbox: Any) -> float:
    """When the last lease, backoff or unsent outbox row still pending is due. After a clock that
    stepped back, that can be an hour away: time passes it too (the work is delayed by the step,
    never stuck)."""
    times = [t for j in waiting for t in (j.lease_until, j.next_run_at) if t is not None]
    times += [r.next_attempt_at for r in outbox if r.sent_at is None and r.next_attempt_at is not None]
    return max(times, default=0.0)


def next_due_at(waiting: Any, outbox: Any, now: float) -> float | None:
    """When the first lease, backoff or unsent outbox row still pending falls due after ``now``,
    or None if none is known (an adapter whose snapshot has no such times)."""
    times = [t for j in waiting for t in (j.lease_until, j.next_run_at) if t is not None and t > now]
    times += [r.next_attempt_at for r in outbox if r.sent_at is None and r.next_attempt_at is not None and r.next_attempt_at > now]
    return min(times, default=None)
