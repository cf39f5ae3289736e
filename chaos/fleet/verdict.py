"""The verdict on a fleet run: the invariant catalog over the whole history, and the run's figures.

The evidence is what outlives every killed process: the engine's database as the harness's audit
triggers recorded it (:class:`~chaos.Snapshot`), the paid model's ledger (every call, with what the
probe saw at that moment) and the receiver's ledger (every request, and whether it applied an
effect). Nothing is taken from a worker's memory.

A kill interrupts at most one step: the one its victim last paid for. A claim that a worker
gave up on its own (the database was busy, its lease was taken over, a retryable error) did the
same. Those are the interruptions that ``bounded-spend`` allows one extra paid call for each.

>>> from chaos.core.world import Call
>>> calls = [Call(1, "d1", "extract", "extract", "w1.0", 1, 10.0, False, True, None)]
>>> interruptions_of(calls, killed={"w1.0"}, abandons=[])
Counter({('d1', 'extract'): 1})
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, TYPE_CHECKING

from chaos.core.invariants import AT_REST, Evidence, Violation, check, idempotent_submit, initial_states, wasted_calls, zombie_calls
from chaos.core.target import resolve
from chaos.fleet.receiver import deliveries, receiver_figures
from chaos.fleet.services import HARNESS_ERROR_PREFIX, CallLedger
from chaos.core.world import Call

if TYPE_CHECKING:
    from chaos.adapters.reference import ReferenceAdapter

__all__ = ["Verdict", "judge", "interruptions_of", "HEADLINE", "INVARIANT_NAMES", "payload_json"]

RESUBMIT_SAMPLE_MAX = 50  # idempotent-submit re-submits a seeded sample of the ids, twice each
INVARIANT_NAMES = (*AT_REST, "idempotent-submit")
# The four figures the soak must show as 0/0/0/0, and the invariant each one counts.
HEADLINE = {
    "lost_jobs": "drains",
    "spend_after_memo": "no-spend-after-memo",
    "duplicate_effects": "outbox-at-least-once",
    "illegal_transitions": "legal-transitions",
}


@dataclass
class Verdict:
    violations: list[Violation]
    figures: dict[str, Any] = field(default_factory=dict)
    # Model calls the harness's own probe could not make (its connection to the database failed):
    # (worker, job, step, at, error). Any makes the run a failure of the harness, whatever the
    # invariants say: a job the probe failed or delayed says nothing about the engine.
    harness_errors: list[tuple[str, str, str, float, str]] = field(default_factory=list)

    @property
    def held(self) -> bool:
        return not self.violations

    @property
    def harness_ok(self) -> bool:
        return not self.harness_errors

    def by_invariant(self) -> dict[str, list[Violation]]:
        out: dict[str, list[Violation]] = {name: [] for name in INVARIANT_NAMES}
        for v in self.violations:
            out.setdefault(v.invariant, []).append(v)
        return out


def interruptions_of(calls: list[Call], *, killed: Iterable[str], abandons: Iterable[tuple[str, str, str, float]]) -> Counter:
    """Per (job, step): kills of the worker that last paid for it, and claims it was given up in."""
    last_of_worker: dict[str, Call] = {}
    by_worker_job: dict[tuple[str, str], list[Call]] = {}
    for c in calls:
        last_of_worker[c.worker] = c
        by_worker_job.setdefault((c.worker, c.job_id), []).append(c)
    out: Counter = Counter()
    for worker in killed:
        call = last_of_worker.get(worker)
        if call is not None:
            out[(call.job_id, call.step)] += 1
    for worker, job_id, _outcome, at in abandons:
        earlier = [c for c in by_worker_job.get((worker, job_id), []) if c.at <= at]
        if earlier:
            out[(job_id, earlier[-1].step)] += 1
    return out


def judge(adapter: ReferenceAdapter, db: str, *, calls_path: str, receiver_path: str, submitted: dict[str, str], killed: set[str], seed: int,
          lost: Counter | None = None) -> Verdict:
    """Run the at-rest catalog and idempotent-submit; compute the figures the reports print.

    ``lost`` holds the steps whose memo row a power cut took (chaos.hostfaults.power_runs): each is one
    more interruption, paid again once by right."""
    snapshot = adapter.inspect(db)
    ledger = CallLedger(calls_path)
    try:
        calls = ledger.calls()
        paid_calls, spend_usd = ledger.spend()
        unit_costs = ledger.unit_costs()
        interruptions = interruptions_of(calls, killed=killed, abandons=ledger.abandons()) + (lost or Counter())
        harness_errors = ledger.harness_errors()
    finally:
        ledger.close()
    ev = Evidence(
        table=adapter.states(),
        step_states=adapter.step_states(),
        settled_states=adapter.settled_states(),
        final_effects=adapter.final_effects(),
        snapshot=snapshot,
        calls=calls,
        deliveries=deliveries(receiver_path),
        submitted=submitted,
        interruptions=interruptions,
        initial_states=initial_states(resolve(adapter)),
    )
    violations = check(ev, at_rest=True)
    violations += _resubmit(adapter, db, submitted, seed)
    memoised_usd = sum(cost for key, cost in unit_costs.items() if key in snapshot.memos)
    receiver = receiver_figures(receiver_path)
    verdict = Verdict(violations, harness_errors=harness_errors)
    by_name = verdict.by_invariant()
    states = Counter(job.state for job in snapshot.jobs.values())
    verdict.figures = {
        "jobs": len(submitted),
        "states": dict(sorted(states.items())),
        "paid_calls": paid_calls,
        "spend_usd": round(spend_usd, 6),
        "memoised_usd": round(memoised_usd, 6),
        "wasted_calls": wasted_calls(ev),
        "wasted_usd": round(spend_usd - memoised_usd, 6),
        "zombie_calls": len(zombie_calls(ev)),
        "interruptions": sum(interruptions.values()),
        "receiver": receiver,
        "lost_jobs": sum(1 for job_id in submitted if job_id not in snapshot.jobs
                         or snapshot.jobs[job_id].state not in ev.settled_states),
        "spend_after_memo": len(by_name["no-spend-after-memo"]),
        "duplicate_effects": receiver["duplicates_applied"],
        "illegal_transitions": len(by_name["legal-transitions"]),
        "violations": {name: len(found) for name, found in by_name.items()},
        "harness_errors": len(harness_errors),
        "failed_by_harness": sum(1 for job in snapshot.jobs.values()
                                 if job.state in ev.settled_states and job.state not in ev.final_effects
                                 and HARNESS_ERROR_PREFIX in (job.last_error or "")),
    }
    return verdict


class _Session:
    """Just enough of a session for idempotent-submit: submit through the engine's own store."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def submit(self, job_id: str, payload: Any) -> None:
        self.store.submit(job_id, payload, now=time.time())


def _resubmit(adapter: ReferenceAdapter, db: str, submitted: dict[str, str], seed: int) -> list[Violation]:
    ids = sorted(submitted)
    sample = random.Random(seed).sample(ids, min(RESUBMIT_SAMPLE_MAX, len(ids)))
    store = adapter.make_store(db)
    try:
        return idempotent_submit(_Session(store), lambda: adapter.inspect(db), {i: submitted[i] for i in sample},
                                 adapter.conflict_errors)
    finally:
        store.close()


def payload_json(payload: Any) -> str:
    return json.dumps(payload, sort_keys=True)
