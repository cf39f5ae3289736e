"""A record: what a crashgate item or ``crash_matrix`` test writes into its report's
``user_properties`` under :data:`RECORD_KEY` (a plain dict, so that under pytest-xdist it
travels from a worker to the controller), and what is read from one wherever it is read: the
JUnit properties of failing records, and the keys of known findings of its violations.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RECORD_KEY", "all_known", "junit_properties", "record_family", "record_keys"]

RECORD_KEY = "crashgate"


def junit_properties(records: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """What a JUnit XML report (``--junitxml``) shows of failing records: the invariants broken
    and the command that replays the first failure (pytest writes user properties as
    ``<property name=... value=...>``)."""
    failed = [rec for rec in records if not rec["held"]]
    if not failed:
        return []
    invariants = sorted({inv for rec in failed for inv, _ in rec["violations"]})
    return [("crashgate_invariant", ",".join(invariants) or "expectation"), ("crashgate_replay", failed[0]["replay"])]


def all_known(rec: dict[str, Any], known: frozenset) -> bool:
    """Whether every violation of a record (a matrix's or a plan's point or baseline) is in the
    file of known findings."""
    return bool(known) and all(key in known for key in record_keys(rec))


def record_keys(rec: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """A point or baseline record's violations as keys of known findings: (family, fault,
    invariant, cause), the fault "" for a baseline, as :func:`chaos.core.findings.known_keys` has them."""
    from chaos.core.findings import normalise

    fault = "" if rec["kind"] == "baseline" else rec.get("fault", "crash")
    return [(record_family(rec), fault, inv, normalise(detail)) for inv, detail in rec["violations"]]


def record_family(rec: dict[str, Any]) -> str:
    """The scenario family of a record: a plan's name, or a matrix's family (its group)."""
    return rec.get("family") or rec["group"]
