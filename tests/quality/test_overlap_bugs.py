"""Proof that pauses and two-level interleavings catch what a crash matrix cannot: bugs that only
appear when two workers overlap. Each planted variant holds under the crash matrix alone and is
caught, by the right invariant, once workers are frozen and interleaved."""

from __future__ import annotations

import pytest

from chaos import ReferenceAdapter, run_matrix

from .variants import OVERLAP


def _invariants(report):
    return {v.invariant for r in report.results for v in r.outcome.violations}


@pytest.mark.parametrize("variant", OVERLAP, ids=lambda v: v.__name__)
def test_an_overlap_bug_passes_the_crash_matrix_and_is_caught_with_pauses(variant):
    adapter = variant()
    crash_only = run_matrix(adapter, families=adapter.families, faults=["crash"])
    assert crash_only.violations == 0, sorted(_invariants(crash_only))
    overlap = run_matrix(adapter, families=adapter.families, faults=adapter.faults, pairs=400)
    found = _invariants(overlap)
    for invariant in variant.catches:
        assert invariant in found, f"{variant.__name__}: expected {invariant}, saw {sorted(found)}"


def test_the_unmodified_engine_holds_under_pauses_and_interleavings():
    report = run_matrix(ReferenceAdapter(), families=["clean", "lost-lease", "sender", "cancel-race"], faults=["pause", "interleave"], pairs=400)
    assert report.violations == 0, [f"{r.id} {v}" for r in report.results for v in r.outcome.violations][:5]
    kinds = report.by_fault()
    assert set(kinds) == {"pause-live", "pause-expired", "interleave"}
    assert sum(1 for r in report.results if r.outcome.exit == "interleaved") > 50


def test_a_worker_frozen_holding_the_write_lock_blocks_the_other_only_for_the_busy_timeout():
    report = run_matrix(ReferenceAdapter(), families=["clean"], faults=["pause"])
    blocked = [r.outcome.blocked_s for r in report.results if r.outcome.blocked_s > 0]
    assert blocked, "no point froze a worker inside a write transaction"
    assert max(blocked) < 1.0
    assert report.violations == 0
