"""Proof that the power fault catches what no crash can: a planted store that acknowledges commits
it never made durable holds under every crash and is caught by durable-commits once the power is
cut; the unmodified engine holds under FULL at every point of the families tried, and under NORMAL
it loses commits (counted and named) but breaks no invariant once they count as interruptions."""

from __future__ import annotations

import pytest

from chaos import run_matrix

from .power_variants import POWER

FAMILIES = ["clean", "sender"]


def _found(report):
    return {v.invariant for r in report.results for v in r.outcome.violations}


@pytest.mark.parametrize("variant", POWER, ids=lambda v: v.__name__)
def test_a_power_only_bug_passes_crashes_and_is_caught_by_a_power_cut(power, variant):
    adapter = variant()
    crash_only = run_matrix(adapter, families=["clean"], faults=["crash"], sample=40)
    assert crash_only.violations == 0, sorted(_found(crash_only))
    report = run_matrix(adapter, families=FAMILIES, faults=list(variant.faults))
    found = _found(report)
    for check in variant.catches:
        assert check in found, f"{variant.__name__}: expected {check}, saw {sorted(found)}"
    caught = [r for r in report.results if r.outcome.violations]
    assert "acknowledged commit(s)" in str(caught[0].outcome.violations[0])


def test_the_reference_engine_loses_nothing_under_full_and_only_commits_under_normal(power):
    report = run_matrix(families=FAMILIES, faults=["power"], jobs=2)
    assert report.violations == 0, [str(v) for r in report.results for v in r.outcome.violations][:5]
    full = [r for r in report.results if r.fault == "power-full"]
    normal = [r for r in report.results if r.fault == "power-normal"]
    assert len(full) == len(normal) > 10
    assert all(r.outcome.exit == "killed" for r in full)
    assert not any(r.outcome.lost_commits for r in full)
    lost = [r for r in normal if r.outcome.lost_commits]
    # Without an fsync the doomed iteration's commits are only in the page cache: most points lose some.
    assert len(lost) > len(normal) // 2
    assert any("memo row of job 'doc-1'" in c for r in lost for c in r.outcome.lost_commits)
    # A lost memo is paid again: the surplus shows as wasted calls, allowed as interruptions.
    assert sum(r.outcome.wasted_calls for r in normal) > sum(r.outcome.wasted_calls for r in full)
