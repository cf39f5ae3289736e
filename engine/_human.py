"""What a person may do to a job: requeue a failed one, resolve a review, cancel a pending one.

Each is a compare-and-swap transition checked against the workflow's table. A job in a state that
does not allow the action raises :class:`IllegalAction` naming the job, its state and the states
that would allow it; nothing changes.

>>> from engine import SqliteStore, LocalModel, GeneratedDocuments, reference_workflow
>>> store = SqliteStore(":memory:")
>>> _ = store.submit("doc-1", {"source": "doc-1"}, now=0.0)
>>> wf = reference_workflow(LocalModel(), GeneratedDocuments())
>>> cancel(store, wf, "doc-1", now=1.0).state
'cancelled'
"""

from __future__ import annotations

from ._errors import IllegalAction, InvalidInput
from ._store import Job, Store
from ._workflow import CANCELLED, NEEDS_HUMAN, PENDING, Workflow

__all__ = ["requeue", "resolve", "cancel", "RESOLUTIONS"]

RESOLUTIONS = ("reverify", "cancel")


def requeue(store: Store, workflow: Workflow, job_id: str, *, now: float) -> Job:
    """Send a job in a failed state back to the state before the step that failed."""
    job = store.get(job_id)
    target = workflow.requeue_target(job.state)
    if target is None:
        raise IllegalAction(job_id, "requeue", job.state, tuple(sorted(workflow.failed_states)))
    return _move(store, workflow, job, target, now, "requeue", tuple(sorted(workflow.failed_states)))


def resolve(store: Store, workflow: Workflow, job_id: str, action: str, *, now: float) -> Job:
    """Settle a ``needs_human`` job: ``reverify`` runs the review step again, ``cancel`` ends it."""
    if action not in RESOLUTIONS:
        raise InvalidInput(f"resolution {action!r} is not one of: {', '.join(RESOLUTIONS)}")
    job = store.get(job_id)
    if job.state != NEEDS_HUMAN or NEEDS_HUMAN not in workflow.table:
        raise IllegalAction(job_id, f"resolve {action}", job.state, (NEEDS_HUMAN,))
    target = CANCELLED if action == "cancel" else workflow.table[NEEDS_HUMAN][0]
    return _move(store, workflow, job, target, now, f"resolve {action}", (NEEDS_HUMAN,))


def cancel(store: Store, workflow: Workflow, job_id: str, *, now: float) -> Job:
    """Cancel a job that has not started."""
    job = store.get(job_id)
    if job.state != PENDING:
        raise IllegalAction(job_id, "cancel", job.state, (PENDING,))
    return _move(store, workflow, job, CANCELLED, now, "cancel", (PENDING,))


def _move(store: Store, workflow: Workflow, job: Job, target: str, now: float, action: str, allowed: tuple[str, ...]) -> Job:
    workflow.check(job.state, target)
    runnable = target in workflow.ready_states
    if not store.human_move(job.id, from_state=job.state, to_state=target, next_run_at=now if runnable else None, now=now):
        current = store.get(job.id)
        raise IllegalAction(job.id, action, current.state, allowed)
    return store.get(job.id)
