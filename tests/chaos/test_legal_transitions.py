"""legal-transitions on a table of one's own: the harness's own damage, quarantined into a parked
state, is never the engine's illegal move, whether or not the parked state has a way out."""

from __future__ import annotations

import pytest

from chaos.adapter import JobView, Snapshot
from chaos.core.invariants import Evidence, legal_transitions


def _evidence(transitions, *, parked_edges=()):
    # An engine of its own; many give a failed job no way out ("dead": ()), the reference a requeue.
    table = {"new": ("working",), "working": ("done", "dead"), "done": (), "dead": tuple(parked_edges)}
    snapshot = Snapshot(jobs={"t-1": JobView("dead", "{}", None, None, 0.0)}, transitions=transitions, damaged={"t-1": "garbled"})
    return Evidence(table=table, step_states={"work": ("working", "done")}, settled_states=frozenset({"done", "dead"}),
                    final_effects={"done": ()}, snapshot=snapshot, calls=[], deliveries=[], initial_states=frozenset({"new"}))


@pytest.mark.parametrize("parked_edges", [(), ("new",)])
def test_a_damaged_state_quarantined_into_a_parked_state_is_legal_with_or_without_a_way_out(parked_edges):
    # The harness wrote "garbled" into the row itself, unaudited; the engine's one move is out of it.
    ev = _evidence([("t-1", None, "new"), ("t-1", "new", "working"), ("t-1", "garbled", "dead")], parked_edges=parked_edges)
    assert legal_transitions(ev) == []


def test_the_engine_moving_a_damaged_state_anywhere_but_a_parked_state_is_still_illegal():
    ev = _evidence([("t-1", None, "new"), ("t-1", "garbled", "working")])
    assert [v.detail for v in legal_transitions(ev)] == ["job 't-1': state 'garbled' is not in the table"]


def test_the_engine_moving_a_damaged_state_into_a_final_state_is_still_illegal():
    """A job no step can place is not finished: guessing it is, is the bug damaged-state catches."""
    ev = _evidence([("t-1", None, "new"), ("t-1", "garbled", "done")])
    assert [v.detail for v in legal_transitions(ev)] == ["job 't-1': state 'garbled' is not in the table"]
