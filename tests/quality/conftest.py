"""What the quality tests of engines built on ``examples/minimal_engine`` (tinyflow) share."""

from __future__ import annotations

import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "minimal_engine")

# Engines built on tinyflow, imported by the tests and the matrix's workers with EXAMPLE on the
# path: they hold no doctest, and --doctest-modules would import them without it.
collect_ignore = ["restart_tinyflow.py", "stepwise_tinyflow.py", "walltime_tinyflow.py", "helpdesk_variants.py"]


@pytest.fixture
def minimal_engine_path(monkeypatch):
    """tinyflow's modules importable here and in the matrix's worker processes."""
    monkeypatch.syspath_prepend(EXAMPLE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([EXAMPLE, ROOT, os.environ.get("PYTHONPATH", "")]))
    return EXAMPLE
