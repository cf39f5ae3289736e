"""Crash classes are sound: killing a worker anywhere in a class ends exactly as killing it at the
class's first point does, on the reference engine, on a user's workflow and on engines with planted
bugs; classes drawn blindly do not.

The crash matrix runs one kill per class (consecutive points with no durable change between them,
see :func:`chaos.core.points.crash_classes`) and gives the class's outcome to its other points; these
tests run every point too (``exhaustive``) and compare, point by point. A class whose kill leaves
the same content as a class of another family, recovered alike, runs once for both (see
``across_families`` in :mod:`chaos.matrix.selection`): run family by family, nothing is shared, and
every point ends the same.
"""

from __future__ import annotations

import functools

import pytest

from chaos import ReferenceAdapter, run_matrix
from chaos.core.points import crash_classes

from .user_workflows import MemoryNotes, QuickNotes
from .variants import InlineSteps, SkipMemoLookup, SplitMemo


@functools.cache
def _every_point(kind: type, families: tuple[str, ...] | None):
    """The crash matrix of a new ``kind()`` at every point of ``families``, run once per test
    process."""
    return run_matrix(kind(), families=families, faults=["crash"], exhaustive=True)


def _ending(result):
    o = result.outcome
    return (o.exit, o.signature(), o.wasted_calls, o.zombie_calls, tuple(sorted(o.results.items())), tuple(sorted(o.effects.items())))


@pytest.mark.parametrize(
    ("adapter", "families"),
    [
        (ReferenceAdapter(), ["sender", "give-up", "cancel-race", "extract-429", "fetch-connection", "resume", "lost-lease"]),
        # A store fault (another connection's write lock, held by the doomed process) is not durable:
        # a kill drops it with the process, so the classes stay those of the files.
        (ReferenceAdapter(), ["claim-busy", "sender-busy", "sender-fail-busy", "damaged-payload"]),
        # An I/O error (libfiu, in the doomed process only) is not durable either; nor is the
        # second worker's clock running ahead.
        (ReferenceAdapter(), ["commit-io-error", "claim-io-error", "sender-read-error", "heartbeat-busy", "damaged-memo", "clock-skew"]),
        # A state the harness damaged (noted by its audit), ids no database can store.
        (ReferenceAdapter(), ["damaged-state", "claimable-parked", "cancel-nul-id", "cancel-half-character-id"]),
        # A hung call: the step thread blocks in real time past the worker's wait, which ends it.
        (ReferenceAdapter(), ["hung-call"]),
        (InlineSteps(), ["sender", "give-up", "cancel-race", "extract-429", "fetch-connection"]),
        (QuickNotes(), None),
        (MemoryNotes(), None),
        (SplitMemo(), ["clean"]),
        (SkipMemoLookup(), ["clean"]),
    ],
    ids=["reference", "reference-store-faults", "reference-io-and-skew", "reference-damage-and-ids", "reference-hung-call", "reference-inline", "notes", "notes-memory", "split-memo", "skip-memo-lookup"],
)
def test_every_point_of_a_crash_class_ends_as_the_point_that_ran(adapter, families):
    every = _every_point(type(adapter), tuple(families) if families else None)
    classes = run_matrix(adapter, families=families, faults=["crash"])

    ran = {r.id: r for r in classes.results}
    assert set(ran) == {r.id for r in every.results}, "the class run must still give every point a result"
    differing = [f"{r.id}: {_ending(r)} != {_ending(ran[r.id])}" for r in every.results if _ending(r) != _ending(ran[r.id])]
    assert not differing, differing[:3]
    run = classes.by_fault()["crash"]["run"]
    assert run * 8 <= len(classes.results), f"{run} of {len(classes.results)} crashes ran: the classes should be far fewer"
    assert every.by_fault()["crash"]["run"] == len(every.results)
    assert classes.violations == every.violations


def test_classes_drawn_blindly_give_different_endings():
    """The comparison above can fail: grouping points without looking at the durable state (here
    runs of 8 consecutive points) puts points with different endings together. The reference
    engine's ``sender`` family (53 points) is enough to show it (6 points differ)."""
    every = _every_point(ReferenceAdapter, ("sender",))
    by_family: dict[str, list] = {}
    for r in every.results:
        by_family.setdefault(r.family, []).append(r)
    differing = 0
    for results in by_family.values():
        for i, r in enumerate(results):
            if _ending(r) != _ending(results[i - i % 8]):
                differing += 1
    assert differing > 0


def test_a_class_shared_by_families_ends_as_its_own_family_ends_it():
    together = run_matrix(ReferenceAdapter(), faults=["crash"], jobs=2)
    across = [r for r in together.results if r.same_as and r.same_as.split("::")[0] != r.family]
    assert len({r.family for r in across}) >= 10, "families prepared alike should share their first classes"
    alone = {}
    for family in sorted({r.family for r in across}):
        for r in run_matrix(ReferenceAdapter(), families=[family], faults=["crash"], jobs=2).results:
            alone[r.id] = r
    differing = [f"{r.id} (as {r.same_as}): {_ending(r)} != {_ending(alone[r.id])}"
                 for r in together.results if r.family in {a.family for a in across} and _ending(r) != _ending(alone[r.id])]
    assert not differing, differing[:3]
    assert not together.violations


def test_classes_shared_blindly_by_families_do_not_end_alike():
    """The comparison above can fail: the first point of ``clean`` and of ``damaged-state`` is the
    same line at the same time, recovered alike, but the harness garbled a job's state in the
    second family's files; shared by the point alone, the damaged job would end as the clean one."""
    report = run_matrix(ReferenceAdapter(), families=["clean", "damaged-state"], faults=["crash"])
    first: dict = {}
    for r in report.results:
        first.setdefault(r.family, r)
    assert first["clean"].point == first["damaged-state"].point
    assert not first["damaged-state"].same_as, "a different content must not share a class"
    assert _ending(first["clean"]) != _ending(first["damaged-state"])


def test_inprocess_mode_kills_at_every_point():
    """``finally`` blocks run after an in-process abandon and may write: no classes there."""
    report = run_matrix(ReferenceAdapter(), families=["sender"], faults=["crash"], mode="inprocess")
    assert report.by_fault()["crash"]["run"] == report.points


def test_points_with_the_same_durable_state_in_a_row_share_a_class():
    assert crash_classes([(1, 0.0), (1, 0.0), (2, 0.0), (2, 5.0), (2, 5.0)]) == [0, 0, 2, 3, 3]
    assert crash_classes([("unwatched", 1), ("unwatched", 2)]) == [0, 1]
