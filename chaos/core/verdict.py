"""What a scenario ended with: the whole catalog checked at rest, read into its :class:`Outcome`.

Everything is read from what outlived every process of the scenario, the database and the
world's ledger, never from a worker's memory. A point's outcome is then compared with its
family's baseline, the same scenario without any fault (``same-outcome``): a crash must be
invisible in the outcome, only in the cost.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, TYPE_CHECKING

from chaos.core.invariants import Violation, check, raised, same_outcome, wasted_calls, zombie_calls
from chaos.core.process import Exit
from chaos.core.scenario import Family, Outcome, Run, Scenario, resolve_states
from chaos.core.world import OUTCOME_FAULTS

if TYPE_CHECKING:
    from chaos.core.target import Target

__all__ = ["checked", "compared", "steps_in_flight", "adapter_raised"]


def checked(run: Run, submitted: dict[str, str], interruptions: Counter, point_id: str, exit_kind: str,
             drained: tuple[list[Violation], list[Violation]]) -> Outcome:
    """The whole catalog at rest, read from what outlived every process: the database and the
    world's ledger."""
    crashes, resubmitted = drained
    evidence = run.evidence(submitted, interruptions)
    violations = crashes[:1] + check(evidence, at_rest=True) + resubmitted
    jobs = evidence.snapshot.jobs
    return Outcome(
        point=point_id,
        exit=exit_kind,
        violations=violations,
        wasted_calls=wasted_calls(evidence),
        zombie_calls=len(zombie_calls(evidence)),
        final_states={j: v.state for j, v in jobs.items()},
        calls=dict(Counter(f"{c.job_id}:{c.step}" for c in evidence.calls)),
        tasks=sorted({c.task for c in evidence.calls}),
        applied=sum(1 for d in evidence.deliveries if d.applied),
        deliveries=len(evidence.deliveries),
        results={j: v.result for j, v in jobs.items()},
        faults_fired=sorted({kind for _, _, kind in run.world.faults_met()}),
        last_errors={j: v.last_error for j, v in jobs.items()},
        effects={d.key: d.payload for d in evidence.deliveries if d.applied},
        raised=run.world.raised(),
    )


def compared(family: Family, outcome: Outcome, adapter: Target) -> list[Violation]:
    """The ``same-outcome`` violations of ``outcome`` against ``family``'s baseline (none where the
    baseline itself did not hold)."""
    if not family.baseline.held:
        return []
    return same_outcome(family.baseline, outcome, resolve_states(_allowed(family.scenario), adapter))


def _allowed(scenario: Scenario) -> tuple[str, ...]:
    """The other final states a job may reach after a fault: the family's own, and any settled
    state where a fault that changes its call's outcome hits only once (a crash before that call,
    recovered with the fault gone, rightly ends elsewhere: a review that passes this time)."""
    once = any(f.kind in OUTCOME_FAULTS and not f.sticky for f in scenario.faults)
    return scenario.allowed + (("<settled>",) if once else ())


def steps_in_flight(run: Run, snapshot: Any = None) -> Counter:
    """Steps that were in flight when the worker died: each may be paid for once more."""
    working = {w: step for step, (w, _) in run.adapter.step_states().items()}
    snapshot = snapshot if snapshot is not None else run.adapter.inspect(run.db)
    return Counter((job_id, working[job.state]) for job_id, job in snapshot.jobs.items() if job.state in working)


def adapter_raised(point_id: str, exc: BaseException) -> Outcome:
    import traceback

    lines = "".join(traceback.format_exception(exc)).rstrip().splitlines()
    tail = "\n".join(lines[-12:])
    return Outcome(point_id, Exit.ERROR, error=tail, violations=[raised("the adapter, in the harness's process", tail)])
