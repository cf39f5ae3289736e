"""Workflows a user would write on ``engine/``, with their own step names and payloads, and the
bugs such users write: the harness must fail each buggy one and pass the correct one.

``notes``: summarise -> classify -> notify (an email effect), on a payload ``{"text": ...}``.

- :class:`NotesAdapter`: correct; every input of a step comes from the payload or the memo rows.
  :class:`QuickNotes` is the same with one family of its own, :class:`UnmappedNotes` without ``tasks()``.
- :class:`MemoryNotes`: ``summarise`` also puts its summary in a module-level dict, and
  ``classify`` reads it from there. In one process that works; after a restart the dict is empty
  and the job fails in ``failed_classify``. Only a recovery in a fresh process shows it.
- :class:`SecondAttemptNotes`: ``classify`` answers differently when the step runs a second time
  (it reads ``ctx.attempt``): a crash mid-step changes the result.
- :class:`ReadmeNotes`: the README's "Use it from Python" workflow with no ``payload`` hook: its
  ``summarise`` reads ``ctx.payload["text"]``, the harness submits ``{"source": ...}``, and every
  job fails without any crash.
- :class:`InspectRaisesOnce`: an adapter whose ``inspect`` raises at one scenario of the matrix.
"""

from __future__ import annotations

import os
from typing import Any

from chaos import ReferenceAdapter
from engine import Step, StepOutput, ValidationFailed, Workflow

HERE = os.path.dirname(os.path.abspath(__file__))
_summaries: dict[str, str] = {}  # MemoryNotes' process memory (the bug)


def notes_workflow(model: Any, *, remember: bool = False, attempt_matters: bool = False) -> Workflow:
    def summarise(ctx: Any) -> StepOutput:
        text = ctx.payload.get("text") if isinstance(ctx.payload, dict) else None
        if not isinstance(text, str) or not text:
            raise ValidationFailed("a note needs a non-empty string 'text'")
        reply = model.complete(ctx, "summarise", text)
        if remember:
            _summaries[ctx.job_id] = reply.text  # BUG: state kept in process memory between steps
        return StepOutput({"summary": reply.text}, cost_usd=reply.cost_usd)

    def classify(ctx: Any) -> StepOutput:
        summary = _summaries[ctx.job_id] if remember else ctx.inputs["summarise"]["summary"]
        reply = model.complete(ctx, "classify", summary)
        label = reply.text[:12]
        if attempt_matters and ctx.attempt > 1:
            label = "retried"  # BUG: the answer depends on how many times the step ran
        return StepOutput({"label": label}, cost_usd=reply.cost_usd)

    def notify(ctx: Any) -> StepOutput:
        email = {"to": "notes@example.com", "label": ctx.inputs["classify"]["label"]}
        return StepOutput({"sent": True}, effects={"email": email})

    return Workflow("notes", [Step("summarise", summarise), Step("classify", classify),
                              Step("notify", notify, effects=("email",))])


class NotesAdapter(ReferenceAdapter):
    """The correct notes workflow, gated with every reference family (its lines are counted)."""

    name = "notes"

    def workflow(self, world: Any) -> Workflow:
        return notes_workflow(world.model)

    def payload(self, job_id: str) -> dict[str, str]:
        return {"text": f"note {job_id}: the pump in hall 3 is leaking again"}

    def poison_payload(self, job_id: str) -> dict[str, str]:
        return {"text": ""}  # summarise refuses an empty note

    def tasks(self) -> dict[str, str]:
        return {"fetch": "summarise", "extract": "summarise", "verify": "classify"}

    def trace_paths(self) -> list[str]:
        return super().trace_paths() + [os.path.join(HERE, "user_workflows.py")]


class QuickNotes(NotesAdapter):
    """The notes workflow with one family of its own, for the planted bugs below."""

    def scenarios(self) -> list[Any]:
        from chaos import Scenario

        return [Scenario("notes", "A crash anywhere in a note's run changes its cost, never its outcome.", jobs=("note-1",))]


class UnmappedNotes(QuickNotes):
    """Without ``tasks()``: the reference families' faults name tasks the workflow lacks."""

    tasks = None  # type: ignore[assignment]


class MemoryNotes(QuickNotes):
    name = "notes-memory"

    def workflow(self, world: Any) -> Workflow:
        return notes_workflow(world.model, remember=True)


class SecondAttemptNotes(QuickNotes):
    name = "notes-second-attempt"

    def workflow(self, world: Any) -> Workflow:
        return notes_workflow(world.model, attempt_matters=True)


def readme_workflow() -> Workflow:
    """The README's workflow, as printed there."""

    def summarise(ctx: Any) -> StepOutput:
        text = ctx.payload["text"]
        return StepOutput({"summary": text[:20]}, cost_usd=0.002)

    def notify(ctx: Any) -> StepOutput:
        return StepOutput({"ok": True}, effects={"email": {"to": "ops@example.com", "body": ctx.inputs["summarise"]["summary"]}})

    return Workflow("notes", [Step("summarise", summarise), Step("notify", notify, effects=("email",))])


class ReadmeNotes(ReferenceAdapter):
    """The README's workflow behind a ReferenceAdapter subclass, without a payload hook."""

    name = "readme-notes"

    def workflow(self, world: Any) -> Workflow:
        return readme_workflow()


class InspectRaisesOnce(ReferenceAdapter):
    """The reference engine, with an ``inspect`` that raises once per process: the first time it
    finds the job in ``extracting`` (right after a kill during the extract step)."""

    name = "inspect-raises"

    def inspect(self, db_path: str) -> Any:
        snapshot = super().inspect(db_path)
        if os.getpid() not in _raised_in and any(job.state == "extracting" for job in snapshot.jobs.values()):
            _raised_in.add(os.getpid())
            raise RuntimeError("inspect cannot read a job in 'extracting'")
        return snapshot


_raised_in: set[int] = set()
