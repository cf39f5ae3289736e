"""tinyflow with a loop of one step per call: each ``run_once`` claims a job, runs its next step
(or publishes it), commits, releases the lease and returns. Gated as one call per iteration, the
crash matrix's doomed iteration is only the first step; declared ``iteration = "until-idle"``, it
is the job's whole run. Importable by the matrix's workers with ``examples/minimal_engine`` on the
path."""

from __future__ import annotations

import json
from typing import Any

import crash
import tinyflow

HERE = __file__


class StepwiseEngine(tinyflow.Engine):
    def _run_once(self) -> str:
        claimed = self.claim()
        if claimed is None:
            return "idle"
        job_id, state, payload, attempts = claimed
        free = {"lease_owner": None, "lease_until": None}
        if attempts > tinyflow.ATTEMPTS_MAX:
            self._move(job_id, state, tinyflow.FAILED, last_error="gave up: claimed too often", **free)
            return "failed"
        memos = {s: json.loads(o) for s, o in self.conn.execute("SELECT step, output FROM step_result WHERE job_id = ?", (job_id,))}
        if state == self.steps[-1].done:
            self._move(job_id, state, tinyflow.FINAL, result=json.dumps(memos[self.steps[-1].name], sort_keys=True), **free)
            return "done"
        step = next(s for s in self.steps if state in (s.before, s.working))
        if state == step.before and not self._move(job_id, step.before, step.working):
            return "lease_lost"
        if step.name in memos:
            return "stepped" if self._move(job_id, step.working, step.done, attempts=0, **free) else "lease_lost"
        try:
            output, cost = step.run(tinyflow.Call(job_id, step.name, self.worker_id), payload, memos)
        except tinyflow.RETRYABLE as exc:
            delay = self.rng.uniform(0, min(tinyflow.BACKOFF_S_MAX, tinyflow.BACKOFF_S * 2 ** attempts))
            self._move(job_id, step.working, step.before, next_run_at=self.clock() + delay, last_error=str(exc), **free)
            return "retry"
        except Exception as exc:
            self._move(job_id, step.working, tinyflow.FAILED, last_error=f"{type(exc).__name__}: {exc}", **free)
            return "failed"
        self.conn.execute("BEGIN IMMEDIATE")
        if self.conn.execute("INSERT INTO step_result (job_id, step, output, cost, at) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                             (job_id, step.name, json.dumps(output, sort_keys=True), cost, self.clock())).rowcount == 0:
            self.conn.execute("ROLLBACK")
            return "lease_lost"
        for kind in step.effects:
            self.conn.execute("INSERT INTO outbox (job_id, kind, payload) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                              (job_id, kind, json.dumps(output[kind], sort_keys=True)))
        if not self._move(job_id, step.working, step.done, attempts=0, **free):
            self.conn.execute("ROLLBACK")
            return "lease_lost"
        self.conn.execute("COMMIT")
        return "stepped"


class StepwiseSession(crash.TinyflowSession):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        old = self.engine
        self.engine = StepwiseEngine(old.conn, old.steps, worker_id=old.worker_id, clock=old.clock, lease_s=old.lease_s, rng=old.rng)


class OneCallStepwise(crash.TinyflowAdapter):
    """The one-step loop gated as if one call were a job's whole run (the default)."""

    name = "tinyflow-stepwise"
    session_type = StepwiseSession

    def targets(self) -> dict[str, Any]:
        return {"worker": StepwiseEngine.run_once, "sender": tinyflow.send_outbox}

    def trace_paths(self) -> list[str]:
        return super().trace_paths() + [HERE]

    def open(self, db: str, world: Any, *, worker_id: str, clock: Any, rng: Any) -> StepwiseSession:
        return StepwiseSession(db, world, worker_id, clock, rng, self.lease_s)


class UntilIdleStepwise(OneCallStepwise):
    """The same engine, declared: an iteration is calls until one answers "idle" or "busy"."""

    iteration = "until-idle"


class NeverIdleStepwise(OneCallStepwise):
    """Declared until-idle, but its run_once claims the same job forever and never says "idle"."""

    iteration = "until-idle"

    def open(self, db: str, world: Any, *, worker_id: str, clock: Any, rng: Any) -> StepwiseSession:
        session = super().open(db, world, worker_id=worker_id, clock=clock, rng=rng)
        session.engine._run_once = lambda: "stepped"  # type: ignore[method-assign]
        return session
