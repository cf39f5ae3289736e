"""A point is found however its file is spelled, and a fault that never reached the engine is no pass.

A point names its file as the process that recorded it imported the module: a test that imported
tinyflow through ``tests/quality/../../examples/minimal_engine`` (as the storm test of
``test_histories_find_a_herd.py`` does, the module then staying in ``sys.modules``) recorded points
in ``.../tests/quality/../../examples/minimal_engine/tinyflow.py``, while the matrix's worker
processes imported ``.../examples/minimal_engine/tinyflow.py``. The workers compared the two
spellings as strings, never reached a point, injected no fault, and the report said no violation
(tinyflow's known weaknesses under the host's faults all went unseen in a whole-suite run).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
import textwrap

import pytest

from chaos import ReferenceAdapter, run_matrix
from chaos.core.points import Killer, Point
from chaos.core.freeze import run_pause
from chaos.core.prepare import prepare
from chaos.core.kill import run_point
from chaos.core.target import resolve
from chaos.core.scenario import for_adapter
from chaos.hostfaults.faults import machine_points, machine_scenarios, run_machine_fault
from chaos.matrix.runner import source_line

from .conftest import EXAMPLE

TINYFLOW_MODULES = ("crash", "tinyflow", "newsletter")


def _module(tmp_path, name: str):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent("""\
        def work():
            total = 0
            for i in range(3):
                total += i
            return total
        """))
    spec = importlib.util.spec_from_file_location(name, str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("spelling", ["dotdot", "symlink"])
def test_a_killer_reaches_a_point_recorded_under_another_spelling_of_its_file(tmp_path, spelling, monkeypatch):
    module = _module(tmp_path, f"points_spelled_{spelling}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    real = module.work.__code__.co_filename
    if spelling == "dotdot":
        (tmp_path / "sub").mkdir()
        recorded = os.path.join(str(tmp_path), "sub", "..", os.path.basename(real))
    else:
        os.symlink(str(tmp_path), str(tmp_path / "link"))  # a checkout reached through a symlinked folder
        recorded = str(tmp_path / "link" / os.path.basename(real))
    hits, resolved = [], []
    point = Point(recorded, 4, 2, "work")  # the loop's body, its second time
    killer = Killer([str(tmp_path)], point, lambda: hits.append(1))
    # No path is resolved while the iteration is traced: a system call there would let another
    # thread of the iteration run where it did not in the recording.
    monkeypatch.setattr(os.path, "realpath", lambda *a, **k: resolved.append(a))
    with killer:
        module.work()
    assert killer.reached and hits == [1]
    assert not resolved


@pytest.fixture
def tinyflow_by_another_path(monkeypatch):
    """tinyflow's modules imported here through ``tests/quality/../../examples/minimal_engine``,
    the matrix's workers importing them through ``examples/minimal_engine``; this process's
    modules put back as they were afterwards."""
    saved = {name: sys.modules.pop(name) for name in TINYFLOW_MODULES if name in sys.modules}
    here = os.path.dirname(os.path.abspath(__file__))
    monkeypatch.syspath_prepend(os.path.join(here, "..", "..", "examples", "minimal_engine"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([EXAMPLE, os.path.dirname(os.path.dirname(here)),
                                                      os.environ.get("PYTHONPATH", "")]))
    try:
        crash = importlib.import_module("crash")
        assert ".." in crash.tinyflow.__file__
        yield crash.adapter()
    finally:
        for name in TINYFLOW_MODULES:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def test_host_faults_reach_tinyflow_imported_here_by_another_spelling_of_its_path(tinyflow_by_another_path):
    # The workers (jobs=2: fresh interpreters) import tinyflow by EXAMPLE, the first entry of
    # their PYTHONPATH; the points were recorded here, by the other spelling.
    report = run_matrix(tinyflow_by_another_path, families=["backlog"], faults=["clock-skew"], jobs=2)
    assert report.results and {r.outcome.exit for r in report.results} == {"faulted"}
    assert {v.invariant for r in report.results for v in r.outcome.violations} == {"fenced-writes"}


def test_a_host_fault_whose_worker_never_reaches_its_point_is_a_violation_not_a_pass(tmp_path):
    adapter = resolve(ReferenceAdapter())
    family = prepare(adapter, for_adapter(machine_scenarios()[0], adapter), str(tmp_path / "family"), seed=0)
    first = family.points[machine_points(family, source_line)[0]]
    never = dataclasses.replace(first, hit=first.hit + 10_000)  # a hit the iteration never gets to
    outcome = run_machine_fault(adapter, family, never, str(tmp_path / "run"), seed=0, fault="clock-back")
    assert outcome.exit == "not-reached"
    assert [v.invariant for v in outcome.violations] == ["point-reached"]
    assert "its fault was never injected" in outcome.violations[0].detail


@pytest.mark.parametrize("fault", ["crash", "crash-inprocess", "pause-live"])
def test_a_crash_or_a_pause_that_never_reaches_its_point_is_a_violation_not_a_pass(tmp_path, fault):
    adapter = resolve(ReferenceAdapter())
    family = prepare(adapter, for_adapter(machine_scenarios()[0], adapter), str(tmp_path / "family"), seed=0)
    never = dataclasses.replace(family.points[0], hit=family.points[0].hit + 10_000)  # a hit the iteration never gets to
    workdir = str(tmp_path / "run")
    if fault == "pause-live":
        outcome = run_pause(adapter, family, never, workdir, seed=0, expired=False)
    else:
        outcome = run_point(adapter, family, never, workdir, seed=0, mode="inprocess" if fault.endswith("inprocess") else "fork")
    assert outcome.exit == "not-reached"
    assert [v.invariant for v in outcome.violations] == ["point-reached"]


def test_warming_parses_a_trees_files_once_and_leaves_a_large_tree_to_the_children(tmp_path, monkeypatch):
    from chaos.core import points

    small = tmp_path / "small"
    small.mkdir()
    for n in range(3):
        (small / f"m{n}.py").write_text(f"def f{n}(x):\n    return x + {n}\n")
    (small / "notes.txt").write_text("not python\n")
    assert points.warm([str(small)]) == 3
    before = points.statement_lines.cache_info().hits
    assert points.statement_lines(str(small / "m1.py")) == frozenset({1, 2})
    assert points.statement_lines.cache_info().hits == before + 1  # parsed by warm, not again

    monkeypatch.setattr(points, "WARM_FILES_MAX", 2)
    big = tmp_path / "big"
    big.mkdir()
    for n in range(3):
        (big / f"m{n}.py").write_text("x = 1\n")
    assert points.warm([str(big)]) == 0
    misses = points.statement_lines.cache_info().misses
    points.statement_lines(str(big / "m0.py"))
    assert points.statement_lines.cache_info().misses == misses + 1  # left to whoever reaches it
