"""Pause classes are sound: freezing a worker anywhere in a class ends exactly as freezing it at
the class's first point does, on the reference engine and on engines with planted overlap bugs.

The pause matrix runs one scenario per class (points with no visible operation between them, see
:func:`chaos.core.points.pause_classes`); these tests run every point too and compare, point by point.
"""

from __future__ import annotations

import pytest

from chaos import ReferenceAdapter, run_matrix
from chaos.core.points import pause_classes

from .variants import ClaimIgnoresLiveLease, NoCompareAndSwap


def _ending(result):
    o = result.outcome
    return (o.exit, o.signature(), o.wasted_calls, o.zombie_calls, o.blocked_s > 0)


@pytest.mark.parametrize(
    ("adapter", "families"),
    [
        (ReferenceAdapter(), ["sender", "give-up", "cancel-race"]),
        (ClaimIgnoresLiveLease(), ["clean"]),
        (NoCompareAndSwap(), ["cancel-race"]),
    ],
    ids=["reference", "claim-ignores-live-lease", "no-compare-and-swap"],
)
def test_every_point_of_a_pause_class_ends_as_the_point_that_ran(adapter, families):
    every = run_matrix(adapter, families=families, faults=["pause"], exhaustive=True)
    classes = run_matrix(adapter, families=families, faults=["pause"])

    ran = {(r.id, r.fault): r for r in classes.results}
    assert set(ran) == {(r.id, r.fault) for r in every.results}, "the class run must still give every point a result"
    differing = [f"{r.id} [{r.fault}]: {_ending(r)} != {_ending(ran[(r.id, r.fault)])}"
                 for r in every.results if _ending(r) != _ending(ran[(r.id, r.fault)])]
    assert not differing, differing[:5]
    run = sum(row["run"] for row in classes.by_fault().values())
    assert run * 5 < len(classes.results), f"{run} of {len(classes.results)} scenarios ran: the classes should be far fewer than the points"
    assert all(row["run"] == row["scenarios"] for row in every.by_fault().values())
    assert classes.violations == every.violations


def test_the_planted_bugs_are_still_caught_and_reported_once_per_class():
    report = run_matrix(ClaimIgnoresLiveLease(), families=["clean"], faults=["pause"])
    violated = [r for r in report.results if not r.outcome.held]
    assert {v.invariant for r in violated for v in r.outcome.violations} >= {"bounded-spend"}
    first = [r for r in violated if not r.same_as]
    assert first and len(first) < len(violated), "each class's violation is seen at its first point and shared by the rest"
    heads = {r.id for r in first}
    assert all(r.same_as in heads for r in violated if r.same_as)


def test_points_with_no_visible_operation_between_them_share_a_class():
    assert pause_classes([0, 0, 0, 2, 2, 5]) == [0, 0, 0, 3, 3, 5]
    assert pause_classes([4]) == [0]
