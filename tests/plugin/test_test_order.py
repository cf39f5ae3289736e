"""A gate's verdict does not depend on the order of the tests.

Planted bug: the orders example's ``cached`` workflow (examples/orders/unsafe.py), whose
``charge`` step reads the order from a module-level dict that ``fetch`` filled. In one process
it works, so the project's in-process test (``chaos_world``) passes; a worker that restarts after
``fetch`` never had the dict, so the crash matrix and the fault plan must fail with
``same-outcome``, at the user's line that raised. They used to pass when the in-process test ran
first in the same pytest process (its workers were forked from pytest's, which held the dict).

Method: one pytester project (real forks, a subprocess per pytest run), run with the in-process
test first, last, alone (left out), and under pytest-xdist; every run must fail the same items
for the same cause.
"""

from __future__ import annotations

import re
import shutil

import pytest

from .conftest import REPO

WORLD_TEST = '''
def test_an_order_is_charged_and_receipted(chaos_world):
    chaos_world.submit("order-1001")  # the job id the matrix and the plan submit: the dict holds it afterwards
    chaos_world.drain()
    assert chaos_world.states() == {"order-1001": "receipt_done"}
'''
MATRIX_TEST = '''
import pytest

@pytest.mark.crash_matrix(families=["clean"])
def test_orders_survive_a_crash_anywhere(crash_matrix):
    crash_matrix()
'''
PLAN = '''
lesson = "A restarted worker has only the memo rows: an order read into process memory is gone."

[points]
jobs = ["order-1001"]
'''


@pytest.fixture
def orders(project: pytest.Pytester) -> pytest.Pytester:
    shutil.copytree(REPO / "examples" / "orders", project.path / "orders", ignore=shutil.ignore_patterns("__pycache__", "*.txt"))
    project.makepyprojecttoml('''
[tool.pytest.ini_options]
pythonpath = ["."]
addopts = "-p no:cacheprovider"
chaos_target = "orders.crash:cached"
''')
    (project.path / "fault_plans").mkdir()
    (project.path / "fault_plans" / "orders.toml").write_text(PLAN)
    return project


def _verdict(result: pytest.RunResult) -> tuple[set[str], set[str]]:
    """The failed matrix test and plan items' causes, and whether the in-process test passed."""
    out = result.stdout.str()
    failed = set(re.findall(r"^FAILED (\S+?)(?: - |$)", out, re.M))
    return {"matrix" if "crash_anywhere" in f else "plan" for f in failed if "world" not in f}, failed


@pytest.mark.slow
def test_the_same_items_fail_for_the_same_cause_in_every_order_and_under_xdist(orders):
    orders.makepyfile(test_a_world=WORLD_TEST, test_b_matrix=MATRIX_TEST)  # the in-process test first
    first = orders.runpytest_subprocess("-p", "no:randomly", "--chaos-points", "12")
    orders.makepyfile(test_z_world=WORLD_TEST)  # ... and last
    (orders.path / "test_a_world.py").unlink()
    last = orders.runpytest_subprocess("-p", "no:randomly", "--chaos-points", "12")
    alone = orders.runpytest_subprocess("-p", "no:randomly", "--chaos-points", "12", "--deselect",
                                        "test_z_world.py::test_an_order_is_charged_and_receipted")
    spread = orders.runpytest_subprocess("-n", "2", "--chaos-points", "12")
    for name, result in (("in-process test first", first), ("last", last), ("alone", alone), ("under -n 2", spread)):
        out = result.stdout.str()
        assert result.ret == pytest.ExitCode.TESTS_FAILED, f"{name}: the gate passed on a step that reads a module cache\n{out}"
        kinds, failed = _verdict(result)
        assert kinds == {"matrix", "plan"}, f"{name}: {sorted(failed)}"
        assert not any("world" in f for f in failed), f"{name}: the in-process test itself should pass"
        assert "same-outcome" in out and "raised from orders/unsafe.py:33" in out, name
    assert _verdict(first) == _verdict(last)  # the very same items
