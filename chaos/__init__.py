"""crashgate's crash-testing harness: kill the worker at every line, then check the invariants.

>>> from chaos import run_matrix
>>> report = run_matrix(families=["sender"], mode="inprocess")
>>> report.points > 0, report.violations
(True, 0)

The names below are imported on first use, not when the package is imported: the pytest plugin
(``chaos.plugin``) is loaded by every pytest run in an environment where crashgate is installed,
and must cost nothing in a project that does not use it. Add a new export to ``_EXPORTS`` (and to
``__all__``), not as an import at the top of this file.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what static checkers and IDEs see; at run time each name loads on first use
    from chaos.adapter import REFERENCE_TARGET, Adapter, Session, Snapshot, load_adapter
    from chaos.adapters.reference import ReferenceAdapter
    from chaos.matrix.families import reference_scenarios
    from chaos.core.invariants import INVARIANTS, Evidence, Violation
    from chaos.matrix.runner import MatrixReport, PointResult, replay_command, run_matrix
    from chaos.machine import ExploreReport, explore, machine_for, state_machine_test
    from chaos.plans.plan import Plan, PlanError, load_plan
    from chaos.core.points import Point
    from chaos.core.sandbox import Sandbox
    from chaos.core.scenario import MODES, Outcome, Scenario
    from chaos.core.world import FAULT_KINDS, Fault, World

__all__ = [
    "Adapter",
    "Evidence",
    "ExploreReport",
    "FAULT_KINDS",
    "Fault",
    "INVARIANTS",
    "MODES",
    "MatrixReport",
    "Outcome",
    "Plan",
    "PlanError",
    "Point",
    "PointResult",
    "REFERENCE_TARGET",
    "ReferenceAdapter",
    "Sandbox",
    "Scenario",
    "Session",
    "Snapshot",
    "Violation",
    "World",
    "explore",
    "load_adapter",
    "load_plan",
    "machine_for",
    "postgres_adapter",
    "reference_adapter",
    "reference_scenarios",
    "replay_command",
    "run_matrix",
    "state_machine_test",
]

# name -> the private module that defines it.
_EXPORTS = {
    "Adapter": ".adapter",
    "REFERENCE_TARGET": ".adapter",
    "ReferenceAdapter": ".adapters.reference",
    "Session": ".adapter",
    "Snapshot": ".adapter",
    "load_adapter": ".adapter",
    "reference_scenarios": ".matrix.families",
    "INVARIANTS": ".core.invariants",
    "Evidence": ".core.invariants",
    "Violation": ".core.invariants",
    "MatrixReport": ".matrix.runner",
    "PointResult": ".matrix.runner",
    "replay_command": ".matrix.runner",
    "run_matrix": ".matrix.runner",
    "ExploreReport": ".machine",
    "explore": ".machine",
    "machine_for": ".machine",
    "state_machine_test": ".machine",
    "Plan": ".plans.plan",
    "PlanError": ".plans.plan",
    "load_plan": ".plans.plan",
    "Point": ".core.points",
    "Sandbox": ".core.sandbox",
    "MODES": ".core.scenario",
    "Outcome": ".core.scenario",
    "Scenario": ".core.scenario",
    "FAULT_KINDS": ".core.world",
    "Fault": ".core.world",
    "World": ".core.world",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'chaos' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # the next lookup is an ordinary global
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def reference_adapter() -> Any:
    """The adapter of the reference engine (``chaos:reference_adapter``)."""
    from chaos.adapters.reference import ReferenceAdapter

    return ReferenceAdapter()


def postgres_adapter() -> Any:
    """The reference engine on PostgreSQL (``chaos:postgres_adapter``): the matrix creates its
    scenario databases on the server given by ``--db postgresql://...`` (or ``--backend postgresql``)."""
    from chaos.adapters.postgres import PostgresReferenceAdapter

    return PostgresReferenceAdapter()
