"""crashgate's crash-testing harness: kill the worker at every line, then check the invariants.

>>> from chaos import run_matrix
>>> report = run_matrix(families=["sender"], mode="inprocess")
>>> report.points > 0, report.violations
(True, 0)
"""

from ._adapter import REFERENCE_TARGET, Adapter, ReferenceAdapter, Session, Snapshot, load_adapter
from ._invariants import INVARIANTS, Evidence, Violation
from ._matrix import MatrixReport, PointResult, replay_command, run_matrix
from ._points import Point
from ._scenario import MODES, Outcome, Scenario
from ._world import FAULT_KINDS, Fault, World
from ._families import reference_scenarios

__all__ = [
    "Adapter",
    "Evidence",
    "FAULT_KINDS",
    "Fault",
    "INVARIANTS",
    "MODES",
    "MatrixReport",
    "Outcome",
    "Point",
    "PointResult",
    "REFERENCE_TARGET",
    "ReferenceAdapter",
    "Scenario",
    "Session",
    "Snapshot",
    "Violation",
    "World",
    "load_adapter",
    "reference_adapter",
    "reference_scenarios",
    "replay_command",
    "run_matrix",
]


def reference_adapter() -> ReferenceAdapter:
    """The adapter of the reference engine (``chaos:reference_adapter``)."""
    return ReferenceAdapter()
