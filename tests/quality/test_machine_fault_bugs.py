"""Proof that the faults of the machine catch bugs the crash matrix cannot: each planted variant
holds under crashes and is caught, by the right check, once its disk fills, its lock is held, its
clock steps back or a row is damaged; the unmodified engine holds under every machine fault."""

from __future__ import annotations

import pytest

from chaos import run_matrix

from .machine_variants import MACHINE


def _found(report):
    return {v.invariant for r in report.results for v in r.outcome.violations}


@pytest.mark.parametrize("variant", MACHINE, ids=lambda v: v.__name__)
def test_a_machine_fault_bug_passes_crashes_and_is_caught_by_its_fault(variant):
    adapter = variant()
    crash_only = run_matrix(adapter, families=["clean"], faults=["crash"], sample=40)
    assert crash_only.violations == 0, sorted(_found(crash_only))
    report = run_matrix(adapter, families=adapter.families, faults=adapter.faults)
    found = _found(report)
    for check in variant.catches:
        assert check in found, f"{variant.__name__}: expected {check}, saw {sorted(found)}"
