"""A workflow is an ordered list of steps; its state table is derived from that list, as data.

Each step has a working state and a done state. An ordinary step also has a failed state, terminal
until a human requeues it; a review step instead sends what it cannot pass to ``needs_human``. Every
working state has an edge back to the state before it: that edge *is* the retry.

>>> wf = Workflow("demo", [Step("a", lambda ctx: 1, working="a_running", done="a_done")])
>>> wf.table["pending"]
('a_running', 'cancelled')
>>> wf.table["a_running"]
('a_done', 'failed_a', 'pending')
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ._errors import IllegalTransition, InvalidInput
from ._keys import check_effect_kind

__all__ = ["Step", "Workflow", "StepOutput", "NeedsHuman", "PENDING", "CANCELLED", "NEEDS_HUMAN"]

PENDING = "pending"
CANCELLED = "cancelled"
NEEDS_HUMAN = "needs_human"

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


@dataclass(frozen=True)
class StepOutput:
    """What a step returns: its JSON output, what it cost, and the effects the outbox must deliver.

    ``effects`` maps an effect kind (declared on the :class:`Step`) to its JSON payload.
    """

    output: Any
    cost_usd: float = 0.0
    effects: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NeedsHuman:
    """Returned by a review step that cannot pass the job: it parks in ``needs_human``."""

    reason: str
    cost_usd: float = 0.0


@dataclass(frozen=True)
class Step:
    """One step of a workflow.

    ``fn(ctx)`` does the work and returns a :class:`StepOutput` (or a bare JSON value). A ``review``
    step may return :class:`NeedsHuman` and has no failed state of its own. ``effects`` names the
    outbox effect kinds the step may emit; ``retry_on`` lists extra exception types to treat as
    retryable (anything unknown is poison). ``timeout_s`` overrides the worker's step timeout.
    """

    name: str
    fn: Callable[..., Any]
    working: str | None = None
    done: str | None = None
    failed: str | None = None
    review: bool = False
    effects: tuple[str, ...] = ()
    retry_on: tuple[type[BaseException], ...] = ()
    timeout_s: float | None = None

    @property
    def working_state(self) -> str:
        return self.working or f"{self.name}_running"

    @property
    def done_state(self) -> str:
        return self.done or f"{self.name}_done"

    @property
    def failed_state(self) -> str | None:
        if self.review:
            return None
        return self.failed or f"failed_{self.name}"


class Workflow:
    """An ordered list of steps and the state table derived from it.

    The table is checked on every move by :meth:`check`; an illegal move raises
    :class:`IllegalTransition` naming both states.
    """

    def __init__(self, name: str, steps: list[Step] | tuple[Step, ...]) -> None:
        self.name = name
        self.steps: tuple[Step, ...] = tuple(steps)
        _validate(name, self.steps)
        self.table: dict[str, tuple[str, ...]] = _derive_table(self.steps)
        self.states: frozenset[str] = frozenset(self.table)
        self._by_working = {s.working_state: (i, s) for i, s in enumerate(self.steps)}
        # A job in one of these states is waiting for the step after it.
        self._next_from: dict[str, Step] = {PENDING: self.steps[0]}
        for before, step in zip(self.steps, self.steps[1:]):
            self._next_from[before.done_state] = step
        self.final_state = self.steps[-1].done_state
        self.terminal_states = frozenset({self.final_state, CANCELLED})
        self.failed_states = frozenset(s.failed_state for s in self.steps if s.failed_state)
        self.parked_states = self.failed_states | ({NEEDS_HUMAN} if NEEDS_HUMAN in self.table else set())
        self.working_states = frozenset(self._by_working)
        self.ready_states = frozenset(self._next_from)

    # -- table lookups ------------------------------------------------------------------------
    def check(self, from_state: str, to_state: str) -> None:
        """Raise :class:`IllegalTransition` unless ``from_state -> to_state`` is an edge."""
        allowed = self.table.get(from_state)
        if allowed is None or to_state not in allowed:
            raise IllegalTransition(from_state, to_state, allowed or ())  # not a crash point: a bug guard: the engine moves only along its own table's edges

    def step_for_working(self, state: str) -> Step | None:
        found = self._by_working.get(state)
        return found[1] if found else None

    def next_step(self, state: str) -> Step | None:
        """The step a job in ``state`` (pending or a done state) is waiting for, if any."""
        return self._next_from.get(state)

    def before(self, step: Step) -> str:
        """The state a job is in just before ``step`` starts: where its retry edge leads."""
        index = self.steps.index(step)
        return PENDING if index == 0 else self.steps[index - 1].done_state

    def step(self, name: str) -> Step:
        for step in self.steps:
            if step.name == name:
                return step
        raise InvalidInput(
            f"workflow {self.name!r} has no step {name!r}; its steps are: "
            + ", ".join(s.name for s in self.steps)
        )

    def review_step(self) -> Step | None:
        return next((s for s in self.steps if s.review), None)

    def requeue_target(self, state: str) -> str | None:
        """Where a human requeue moves a job parked in ``state`` (a failed state), if anywhere."""
        for step in self.steps:
            if step.failed_state == state:
                return self.before(step)
        return None

    def to_json(self) -> dict[str, list[str]]:
        return {state: list(nxt) for state, nxt in self.table.items()}


def _derive_table(steps: tuple[Step, ...]) -> dict[str, tuple[str, ...]]:
    table: dict[str, tuple[str, ...]] = {PENDING: (steps[0].working_state, CANCELLED)}
    for index, step in enumerate(steps):
        before = PENDING if index == 0 else steps[index - 1].done_state
        bad_end = NEEDS_HUMAN if step.review else step.failed_state
        table[step.working_state] = (step.done_state, bad_end, before)  # type: ignore[assignment]
        table[step.done_state] = (steps[index + 1].working_state,) if index + 1 < len(steps) else ()
    review = next((s for s in steps if s.review), None)
    if review is not None:
        index = steps.index(review)
        table[NEEDS_HUMAN] = (PENDING if index == 0 else steps[index - 1].done_state, CANCELLED)
    table[CANCELLED] = ()
    for index, step in enumerate(steps):
        if step.failed_state is not None:
            table[step.failed_state] = (PENDING if index == 0 else steps[index - 1].done_state,)
    return table


def _validate(name: str, steps: tuple[Step, ...]) -> None:
    if not steps:
        raise InvalidInput(f"workflow {name!r} has no steps; pass at least one Step")  # not a crash point: a bad workflow, refused when it is defined
    seen: set[str] = {PENDING, CANCELLED, NEEDS_HUMAN}
    for step in steps:
        if not _NAME.match(step.name):
            raise InvalidInput(  # not a crash point: a bad workflow, refused when it is defined
                f"step name {step.name!r} in workflow {name!r} must match {_NAME.pattern} (lowercase, digits, _)"
            )
        for state in (step.working_state, step.done_state, step.failed_state):
            if state is None:
                continue
            if not _NAME.match(state):
                raise InvalidInput(f"state name {state!r} of step {step.name!r} must match {_NAME.pattern}")  # not a crash point: a bad workflow, refused when it is defined
            if state in seen:
                raise InvalidInput(  # not a crash point: a bad workflow, refused when it is defined
                    f"state {state!r} of step {step.name!r} is used twice in workflow {name!r}; "
                    "every step needs its own working, done and failed states"
                )
            seen.add(state)
    _validate_effects(name, steps)
    if sum(1 for s in steps if s.review) > 1:
        raise InvalidInput(  # not a crash point: a bad workflow, refused when it is defined
            f"workflow {name!r} has more than one review step; needs_human must lead back to one place"
        )


def _validate_effects(name: str, steps: tuple[Step, ...]) -> None:
    """Each effect kind is an identifier and belongs to one step: a job's effect is keyed
    ``<job id>:<kind>`` (the key the outbox keeps one row for and the receiver dedupes on), so a
    kind holding ``:`` could give another job's key, and a second step emitting the same kind would
    have its effect dropped as a duplicate of the first."""
    declared: dict[str, str] = {}
    for step in steps:
        if isinstance(step.effects, str) or not all(isinstance(kind, str) and kind for kind in step.effects):
            raise InvalidInput(  # not a crash point: a bad workflow, refused when it is defined
                f"effects={step.effects!r} of step {step.name!r} must be a tuple of effect kinds (non-empty strings), "
                "for example effects=('email',)"
            )
        for kind in step.effects:
            check_effect_kind(kind, f"of step {step.name!r} in workflow {name!r}")
            first = declared.setdefault(kind, step.name)
            if first != step.name:
                raise InvalidInput(  # not a crash point: a bad workflow, refused when it is defined
                    f"effect kind {kind!r} is declared by steps {first!r} and {step.name!r} of workflow {name!r}; a job "
                    f"delivers one effect per kind (keyed '<job id>:{kind}', which the receiver dedupes on), so the second "
                    "would never be sent: give each step's effect a kind of its own"
                )
