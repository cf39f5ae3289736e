"""What a random history raises when an invariant does not hold: :class:`InvariantViolated`, made
into a class per invariant and kind of event (:func:`violated`), so that Hypothesis tells the
findings apart.
"""

from __future__ import annotations

from chaos.histories.events import Event
from chaos.core.invariants import INVARIANTS, Violation, describe

__all__ = ["LOG_LINES_MAX", "HUMAN_ACTIONS", "HUMAN_ACTIONS_DOC", "AT_REST", "BEFORE", "InvariantViolated", "violated", "kind_of"]

LOG_LINES_MAX = 60
HUMAN_ACTIONS = "human-actions"
# The kind of event of a violation found once the history is over, and of one found before it began.
AT_REST, BEFORE = "at rest", "before any history"
HUMAN_ACTIONS_DOC = (
    "An illegal human action (requeue, resolve, cancel) raises the engine's clear error and changes "
    "nothing; a legal one is accepted."
)


class InvariantViolated(AssertionError):
    """An invariant did not hold during a random history; the message says what happened.

    A history raises :func:`violated`'s subclass for the invariant and the kind of event that
    revealed it, so that Hypothesis tells the findings apart (it knows a failure by its type and
    the line that raised it, which is the same for every invariant).
    """

    invariant: str = ""
    kind: str = ""

    def __init__(self, violations: list[Violation], when: str, log: list[str], replay: str) -> None:
        self.violations = violations
        self.log = list(log)  # what happened, kept for a failure Hypothesis could not replay (flaky)
        lines = [f"{len(violations)} {'violation' if len(violations) == 1 else 'violations'} {when}:"]
        lines += [f"  {v}" for v in violations]
        for name in sorted({v.invariant for v in violations}):
            doc = HUMAN_ACTIONS_DOC if name == HUMAN_ACTIONS else describe(INVARIANTS[name]) if name in INVARIANTS else ""
            lines.append(f"  {name} holds when: {doc}")
        lines.append("what happened:")
        lines += [f"  {line}" for line in log[-LOG_LINES_MAX:]]
        if replay:
            lines.append(f"replay: {replay}")
        super().__init__("\n".join(lines))


_VIOLATED: dict[tuple[str, str], type[InvariantViolated]] = {}


def violated(invariant: str, kind: str) -> type[InvariantViolated]:
    """The :class:`InvariantViolated` subclass for ``invariant`` revealed by an event of ``kind``
    (made once, then the same class every time: Hypothesis compares the types).

    >>> violated("bounded-spend", "Run") is violated("bounded-spend", "Run")
    True
    >>> violated("bounded-spend", "Run") is violated("bounded-spend", "Send")
    False
    """
    cls = _VIOLATED.get((invariant, kind))
    if cls is None:
        # Named like its base, so a report reads "InvariantViolated: ..." whatever the finding.
        cls = type("InvariantViolated", (InvariantViolated,), {"invariant": invariant, "kind": kind, "__module__": __name__})
        cls.__qualname__ = f"InvariantViolated[{invariant}, {kind}]"
        _VIOLATED[(invariant, kind)] = cls
    return cls


def kind_of(event: Event) -> str:
    """The kind of an event, as findings are told apart: its type, and whether it kills."""
    return type(event).__name__ + (" with a kill" if getattr(event, "kill", None) is not None else "")
