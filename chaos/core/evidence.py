"""What the invariants read and what they report: :class:`Evidence`, everything gathered after a
scenario or a rule from what outlives a worker (the adapter's snapshot of the engine's database
and the world's ledger), and :class:`Violation`, an invariant's finding; with the two answers
of an adapter that every check depends on, its submit policy and its initial states.

>>> str(Violation("drains", "job 'a' is still leased"))
"drains: job 'a' is still leased"
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence, TYPE_CHECKING

from chaos.adapter import Snapshot
from chaos.core.world import Call, Delivery

if TYPE_CHECKING:
    from chaos.core.target import Target

__all__ = ["Violation", "Evidence", "submit_policy", "initial_states"]


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"


@dataclass
class Evidence:
    """Everything an invariant may look at, gathered by the harness after a scenario or a rule."""

    table: Mapping[str, Sequence[str]]
    step_states: Mapping[str, tuple[str, str]]
    settled_states: frozenset[str]
    final_effects: Mapping[str, Sequence[str]]
    snapshot: Snapshot
    calls: list[Call]
    deliveries: list[Delivery]
    submitted: dict[str, str] = field(default_factory=dict)
    interruptions: Counter = field(default_factory=Counter)
    previous_memos: dict[tuple[str, str], str] | None = None
    initial_states: frozenset[str] = frozenset({"pending"})  # the states a job may be created in
    escapes: list[tuple[str, str, int]] = field(default_factory=list)  # effects outside the outbox: (what, where, times)
    # (job, step, fault kind) of the send faults met inside a step that sends its effect itself (the
    # adapter's sends_from_steps): each is a fault of that step, as a model's fault is of the step calling it.
    step_send_faults: list[tuple[str, str, str]] = field(default_factory=list)

    @classmethod
    def gather(cls, adapter: Target, db: Any, world: Any, *, submitted: dict[str, str], interruptions: Counter, snapshot: Snapshot | None = None) -> "Evidence":
        """Read everything the catalog needs: the adapter's table and a snapshot of ``db``, and
        the world's ledger."""
        return cls(
            table=adapter.states(),
            step_states=adapter.step_states(),
            settled_states=adapter.settled_states(),
            final_effects=adapter.final_effects(),
            snapshot=snapshot if snapshot is not None else adapter.inspect(db),
            calls=world.calls(),
            deliveries=world.deliveries(),
            submitted=submitted,
            interruptions=interruptions,
            initial_states=adapter.initial,
            escapes=world.escapes(),
            step_send_faults=world.step_send_faults(),
        )


def submit_policy(adapter: Target) -> str:
    """What ``adapter``'s engine does with an existing id and another payload: its
    ``submit_conflict`` ("raises", the default, or "first-wins")."""
    return adapter.submit_conflict


def initial_states(adapter: Target) -> frozenset[str]:
    """The states a job of ``adapter`` may be created in: its ``initial_states()``, else
    ``pending`` where its table has one (the reference's), else the table's first state."""
    return adapter.initial
