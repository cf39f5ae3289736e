"""Re-run one step of one job with the exact input it had, against the current code.

``step_result`` is kept after completion for this: it holds every step's output, so the inputs of
any step can be rebuilt exactly. Replay writes nothing: the job, its memo and its outbox are left as
they are (a paid step does pay again: replay is a deliberate call).

>>> from engine import SqliteStore, Worker, FakeClock, LocalModel, GeneratedDocuments, reference_workflow
>>> store = SqliteStore(":memory:")
>>> wf = reference_workflow(LocalModel(), GeneratedDocuments())
>>> _ = store.submit("doc-1", {"source": "doc-1"}, now=0.0)
>>> _ = Worker(store, wf, clock=FakeClock(0.0), threaded=False).run_once()
>>> replay(store, wf, "doc-1", "extract").same
True
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any

from ._clock import Clock, SystemClock
from ._errors import InvalidInput
from ._store import Store
from ._workflow import NeedsHuman, StepOutput, Workflow

__all__ = ["replay", "ReplayResult"]


@dataclass(frozen=True)
class ReplayResult:
    job_id: str
    step: str
    stored: Any
    new: Any
    diff: str

    @property
    def same(self) -> bool:
        return not self.diff


class _ReplayContext:
    def __init__(self, job: Any, step: str, inputs: dict[str, Any], clock: Clock) -> None:
        self.job_id = job.id
        self.step = step
        self.payload = job.payload
        self.inputs = inputs
        self.attempt = 1
        self.worker_id = "replay"
        self.token = -1
        self.deadline = float("inf")
        self._clock = clock

    def now(self) -> float:
        return self._clock.now()

    def heartbeat(self) -> None:
        """Replay holds no lease: nothing to renew."""


def replay(store: Store, workflow: Workflow, job_id: str, step_name: str, *, clock: Clock | None = None) -> ReplayResult:
    """Run ``step_name`` of ``job_id`` again and diff its output against the stored one."""
    step = workflow.step(step_name)
    job = store.get(job_id)
    memos = store.memos(job_id)
    if step_name not in memos:
        raise InvalidInput(
            f"job {job_id!r} has no stored result for step {step_name!r} to compare with; "
            f"steps with stored results: {', '.join(sorted(memos)) or 'none'}"
        )
    index = workflow.steps.index(step)
    inputs = {s.name: memos[s.name] for s in workflow.steps[:index] if s.name in memos}
    raw = step.fn(_ReplayContext(job, step_name, inputs, clock or SystemClock()))
    if isinstance(raw, NeedsHuman):
        new: Any = {"needs_human": raw.reason}
    else:
        new = raw.output if isinstance(raw, StepOutput) else raw
    stored = memos[step_name]
    before = json.dumps(stored, indent=2, sort_keys=True).splitlines()
    after = json.dumps(new, indent=2, sort_keys=True).splitlines()
    diff = "\n".join(difflib.unified_diff(before, after, "stored", "replayed", lineterm=""))
    return ReplayResult(job_id, step_name, stored, new, diff)
