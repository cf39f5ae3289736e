"""Proof that the crash matrix catches real bugs: each planted variant is caught, by the right
invariant, while the unmodified engine holds at every point of the same families."""

from __future__ import annotations

import pytest

from chaos import ReferenceAdapter, run_matrix

from .variants import PLANTED, TIMING, ReleaseInFinally


@pytest.mark.parametrize("variant", PLANTED + TIMING, ids=lambda v: v.__name__)
def test_the_crash_matrix_catches_each_planted_bug_with_the_right_invariant(variant):
    adapter = variant()
    report = run_matrix(adapter, mode="fork", families=adapter.families)
    found = {v.invariant for r in report.results for v in r.outcome.violations}
    found |= {v.invariant for b in report.baselines.values() for v in b.violations}
    assert report.violations > 0, f"{variant.__name__} was not caught"
    for invariant in variant.catches:
        assert invariant in found, f"{variant.__name__}: expected {invariant}, saw {sorted(found)}"


def test_the_unmodified_engine_holds_at_every_point_of_those_families():
    families = sorted({f for v in PLANTED + TIMING + (ReleaseInFinally,) for f in v.families})
    report = run_matrix(ReferenceAdapter(), mode="fork", families=families)
    assert report.points > 1000
    assert report.violations == 0, [str(v) for r in report.results for v in r.outcome.violations][:5]
    assert all(r.outcome.exit == "killed" for r in report.results)


def test_a_cleanup_in_finally_is_caught_by_fork_mode_and_missed_by_inprocess_mode():
    fork = run_matrix(ReleaseInFinally(), mode="fork", families=["sender"])
    inprocess = run_matrix(ReleaseInFinally(), mode="inprocess", families=["sender"])
    assert "outbox-at-least-once" in {v.invariant for r in fork.results for v in r.outcome.violations}
    assert inprocess.points == fork.points
    assert inprocess.violations == 0


def test_both_kill_modes_give_the_same_outcome_at_every_point_of_the_reference_engine():
    families = ["clean", "sender", "extract-5xx", "lost-lease"]
    fork = run_matrix(ReferenceAdapter(), mode="fork", families=families)
    inprocess = run_matrix(ReferenceAdapter(), mode="inprocess", families=families)
    assert [r.id for r in fork.results] == [r.id for r in inprocess.results]
    differ = [f.id for f, i in zip(fork.results, inprocess.results) if f.outcome.signature() != i.outcome.signature()]
    assert differ == []
