"""What the tests of the shipped library adapters read from a crash matrix's report."""

from __future__ import annotations

__all__ = ["DAMAGE_FAMILIES", "violations"]

# The families that damage what a job's rows hold: not applicable where an adapter declares nothing to damage.
DAMAGE_FAMILIES = ["damaged-payload", "damaged-memo", "damaged-state", "claimable-parked"]


def violations(report) -> list[tuple[str, str]]:
    """(invariant, message) of every violation in the report, the baselines' too."""
    outcomes = [r.outcome for r in report.results] + list(report.baselines.values())
    return [(v.invariant, v.detail) for o in outcomes for v in o.violations]
