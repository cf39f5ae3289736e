"""The end of a random history: the faults stop, the clock passes every lease and backoff, the
system drains in a fresh process, and the whole catalog of invariants is checked at rest, with
``same-outcome``: each job ends as the same payload does alone, without any fault.

:class:`AtRest` is a part of :class:`chaos.histories.state_machine.Histories`, which inherits
it; its methods read the history's state (its adapter, world, clock, workers and log) and call
the history's own checks.
"""

from __future__ import annotations

import shutil
from typing import Any

from engine import NO_PROGRESS

from chaos.adapter import Snapshot
from chaos.histories.alone import run_alone
from chaos.histories.events import WORKERS, Heal, Resume
from chaos.histories.lives import RECOVER, SECOND, Env, HungStep, abandon_frozen, live
from chaos.core.invariants import Violation, check, hangs, idempotent_submit, submit_policy
from chaos.core.iteration import one_iteration
from chaos.core.recovery import recovering_workers, recovery_wait_s
from chaos.core.settle import settle
from chaos.core.world import OUTCOME_FAULTS
from chaos.histories.violations import AT_REST

__all__ = ["AtRest", "RESTART_ITERATIONS_MAX", "GIVE_UP_INTERRUPTIONS"]

RESTART_ITERATIONS_MAX = 50  # a restarted worker's iterations at rest, before the last one drains
# A job that lost its worker this many times may be parked by the engine's give-up rule.
GIVE_UP_INTERRUPTIONS = 5


class AtRest:
    """The end of a history, for :class:`chaos.histories.state_machine.Histories`: drain, then
    check everything at rest."""

    def teardown(self) -> None:
        try:
            if self.held_lock is not None or self.env.page_limit is not None:
                self.log.append(f"{len(self.log) + 1}. at the end: {self._heal(Heal())}")
            if self.ok:
                for worker in list(self.frozen):  # a history ends with every frozen worker woken
                    self.log.append(f"{len(self.log) + 1}. at the end: {self._resume(Resume(worker))}")
                self._drain_and_check()
        finally:
            if self.held_lock is not None:
                self.held_lock.release()
                self.held_lock = None
            for frozen in self.frozen.values():  # after a failure: never left stopped
                abandon_frozen(frozen)
            self.frozen.clear()
            self.env.close()
            self.world.close()
            if self.adapter.release is not None:  # an adapter's cached reader, if any
                self.adapter.release(self.env.db)
            if self.adapter.server is not None:  # a database of the adapter's own: the history owns it
                self.adapter.server.drop_db(self.env.db)
            shutil.rmtree(self.env.directory, ignore_errors=True)

    def _drain_and_check(self) -> None:
        """Stop the faults, let time pass every lease and backoff, drain in a fresh process, check
        everything, and that each job ended as it would have without any fault."""
        self.log.append(f"{len(self.log) + 1}. at rest: faults stopped, the clock past every lease and backoff, drained")
        self.world.disarm()
        self.world.during_slow = None
        self.clock.advance(recovery_wait_s(self.adapter))
        submitted, inspect, settled, conflicts = dict(self.submitted), self._inspect, self.settled, self.adapter.conflict_errors
        policy = submit_policy(self.adapter)
        # The adapter's recovery model: a new worker, or (restart) every worker that ran, each
        # under its own identity, the last one draining.
        ran = [w for w in (*WORKERS, SECOND) if self.env.lives[w] or self.env.runs[w]]
        *first, last = recovering_workers(self.adapter, ran, RECOVER)

        def drain(env: Env) -> tuple[list[Violation], list[Violation]]:
            def restart(session: Any, n: int) -> Any:
                env.bury(last)
                return env.session(last)

            for worker in first:
                iteration = one_iteration(self.adapter, env.session(worker))
                for _ in range(RESTART_ITERATIONS_MAX):
                    if iteration() in NO_PROGRESS:
                        break
            session, crashed, _ = settle(env.session(last), inspect, settled, self.clock, restart=restart)
            return crashed, idempotent_submit(session, inspect, submitted, conflicts, policy)

        try:
            crashed, resubmitted = live(self.env, RECOVER, drain)
        except HungStep:  # the drain's process ran past the bound: killed, and a finding of its own
            self._fail([hangs("the drain at rest", "", self.env.wait_s)], AT_REST)
            return
        snapshot = self._inspect()
        violations = crashed[:1] + check(self._evidence(snapshot), at_rest=True) + resubmitted
        violations += self._same_outcome(snapshot)
        if violations:
            self._fail(violations, AT_REST)

    def _same_outcome(self, snapshot: Snapshot) -> list[Violation]:
        """``same-outcome`` for a history: every job whose history gives it no reason to end
        otherwise (a person's action on it, a poison or failed-review fault it met, a payload its
        first step refuses, a job that lost its worker again and again) ends as the same payload
        does alone, without any fault, in a fresh database: the same state, result and effects."""
        applied = {d.key: d.payload for d in self.world.deliveries() if d.applied}
        faulted = {job for job, _, kind in self.world.faults_met() if kind in OUTCOME_FAULTS}
        out: list[Violation] = []
        for job_id, payload_json in sorted(self.submitted.items()):
            job = snapshot.jobs.get(job_id)
            if job is None or job_id in self.touched or job_id in faulted or payload_json in self.refused_payloads:
                continue
            if sum(n for (j, _), n in self.interruptions.items() if j == job_id) >= GIVE_UP_INTERRUPTIONS:
                continue
            alone = run_alone(self.adapter, job_id, payload_json)
            if alone is None:
                continue
            state, result, effects = alone
            if job.state != state:
                why = f" (last_error: {job.last_error!r})" if job.last_error else ""
                out.append(Violation("same-outcome", f"job {job_id!r} ended {job.state!r}{why}; the same payload alone, without any fault, ends {state!r}"))
            elif job.result != result:
                out.append(Violation("same-outcome", f"job {job_id!r} ended {state!r} with the result {job.result!r}; alone, without any fault: {result!r}"))
            else:
                changed = sorted(k for k, v in effects.items() if applied.get(k, v) != v)
                if changed:
                    out.append(Violation("same-outcome", f"job {job_id!r}: effects {', '.join(changed)} applied with another payload than alone, without any fault"))
        return out

