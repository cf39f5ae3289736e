"""The fixtures users write their own tests with, and the marker that selects crash-matrix tests."""

from __future__ import annotations

import shlex
import sys

import pytest

from .conftest import add_plan

WORLD_TESTS = '''
import pytest
from chaos import Fault


def test_a_fresh_world_delivers_a_job_and_every_invariant_holds(chaos_world):
    chaos_world.submit("doc-1")
    chaos_world.drain()
    assert chaos_world.states() == {"doc-1": "delivered"}
    assert chaos_world.applied() == {"doc-1:delivery": 1}
    assert chaos_world.check() == []


def test_each_test_gets_its_own_database(chaos_world):
    assert chaos_world.states() == {}


def test_a_timeout_costs_one_more_call(chaos_world):
    chaos_world.submit("doc-1")
    chaos_world.arm(Fault("timeout", task="extract"))
    chaos_world.drain()
    assert len(chaos_world.calls("extract")) == 2
    assert chaos_world.check() == []


@pytest.mark.crash_matrix(target="planted:NoJitter")
def test_the_marker_picks_the_target(chaos_world):
    assert type(chaos_world.adapter).__name__ == "NoJitter"
'''

MATRIX_TESTS = '''
import pytest


@pytest.mark.crash_matrix(families=["sender"])
def test_the_sender_survives_a_crash_at_every_line(crash_matrix):
    report = crash_matrix()
    assert report.points > 30 and report.violations == 0


@pytest.mark.crash_matrix(target="quality.variants:MarkBeforeSend", families=["sender"])
def test_a_sender_that_marks_before_sending_is_caught(crash_matrix):
    crash_matrix()


def test_an_ordinary_test():
    pass
'''


def test_chaos_world_is_a_fresh_database_and_world_per_test(project):
    project.makepyfile(test_world=WORLD_TESTS)
    project.runpytest().assert_outcomes(passed=4)


def test_crash_matrix_runs_the_families_of_its_marker_and_fails_explained_on_a_violation(project):
    project.makepyfile(test_gate=MATRIX_TESTS)
    result = project.runpytest()
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert "crash points violated an invariant" in out
    assert "outbox-at-least-once (" in out and "outbox row 'doc-1:delivery' is marked sent but was never delivered" in out
    assert "why it matters: Protects against the three outbox mistakes" in out
    assert "replay: python -m pytest test_gate.py::test_a_sender_that_marks_before_sending_is_caught --chaos-points 'sender::" in out


def test_a_crash_matrix_point_id_printed_in_the_summary_is_accepted_by_pytest(project):
    """Pasted back, the summary's replay command reruns that one point (the test's id, narrowed by --chaos-points)."""
    project.makepyfile(test_gate=MATRIX_TESTS)
    out = project.runpytest("-k", "marks_before_sending").stdout.str()
    listed = [line.strip().partition("replay: python -m pytest ")[2] for line in out.splitlines()
              if "replay: python -m pytest test_gate.py::" in line and "--chaos-points" in line]
    assert listed, out
    pasted = shlex.split(listed[0])
    again = project.runpytest(*pasted)
    again.assert_outcomes(failed=1)
    assert "1 crash points violated an invariant" in again.stdout.str() or "1 of 1 crash points" in again.stdout.str(), again.stdout.str()


FAULTS_TEST = '''
import pytest


@pytest.mark.crash_matrix(families=["sender"])
def test_the_settings_pick_the_fault_kinds(crash_matrix):
    report = crash_matrix(points=6)
    assert {r.fault for r in report.results} <= {"pause-live", "pause-expired", "interleave"}
    assert report.faults == ("pause", "interleave")
    assert sum(1 for r in report.results if r.fault == "interleave") <= 2


@pytest.mark.crash_matrix(families=["sender"], faults=["crash"])
def test_the_marker_overrides_them(crash_matrix):
    assert {r.fault for r in crash_matrix(points=2).results} == {"crash"}
'''


def test_crash_matrix_passes_the_faults_and_pairs_settings_to_the_matrix(project):
    project.makepyfile(test_faults=FAULTS_TEST)
    project.runpytest("--chaos-faults", "pause,interleave", "--chaos-pairs", "2").assert_outcomes(passed=2)


def test_the_marker_selects_crash_matrix_tests_and_fault_plan_items(project):
    project.makepyfile(test_gate=MATRIX_TESTS)
    add_plan(project, "double_submit")
    chosen = project.runpytest("-m", "crash_matrix", "--collect-only", "-q")
    assert "test_gate.py::test_an_ordinary_test" not in chosen.stdout.str()
    assert "fault_plans/double_submit.toml::same-payload-twice-is-one-job" in chosen.stdout.str()
    others = project.runpytest("-m", "not crash_matrix", "--collect-only", "-q")
    assert "1/5 tests collected (4 deselected)" in others.stdout.str()


BAD_TARGET_TESTS = '''
import pytest

@pytest.mark.crash_matrix(families=["clean"])
def test_gate(crash_matrix):
    crash_matrix()

def test_world(chaos_world):
    chaos_world.submit("doc-1")
'''


@pytest.mark.parametrize("settings", [["--chaos-target", "nosuch:adapter"], ["-o", "chaos_target=planted:nothing_here"]])
def test_a_target_that_does_not_load_stops_a_fixtures_run_with_exit_2_and_one_line(project, settings):
    """The target is the run's setting: a typo in it is an operating error, reported once, naming
    the target, where it was set and why it does not load, never a traceback per test."""
    project.makepyfile(test_gate=BAD_TARGET_TESTS)
    result = project.runpytest(*settings)
    assert result.ret == 2
    out = result.stdout.str()
    where = "command line --chaos-target" if settings[0] == "--chaos-target" else "ini key chaos_target"
    assert f"(from {where}): cannot load target" in out
    assert "Traceback" not in out and "def load_adapter" not in out
    result.assert_outcomes()  # nothing ran, nothing passed


def test_a_crash_matrix_argument_it_refuses_fails_that_test_with_one_line(project):
    project.makepyfile(test_gate='''
import pytest

@pytest.mark.crash_matrix(families=["no-such-family"])
def test_gate(crash_matrix):
    crash_matrix()

def test_other():
    pass
''')
    result = project.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "crash_matrix(): " in out and "no-such-family" in out
    assert "def run_matrix" not in out and "raise ValueError" not in out


STATE_MACHINE_TEST = '''
def test_random_histories_hold(chaos_state_machine):
    chaos_state_machine(max_examples=2, stateful_step_count=4)
'''


def test_chaos_state_machine_skips_with_the_reason_where_there_is_no_explorer(project, monkeypatch):
    monkeypatch.setitem(sys.modules, "chaos.machine", None)  # an import of it now fails
    project.makepyfile(test_machine=STATE_MACHINE_TEST)
    result = project.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    assert "the crashgate state-machine explorer (chaos.machine.state_machine_test) is not available" in result.stdout.str()


def test_chaos_state_machine_explores_the_configured_target(project):
    pytest.importorskip("chaos.machine", reason="this crashgate has no state-machine explorer yet")
    project.makepyfile(test_machine=STATE_MACHINE_TEST)
    project.runpytest().assert_outcomes(passed=1)


def test_a_file_of_known_findings_lets_a_known_weakness_pass_and_keeps_the_rest(project, tmp_path):
    """--chaos-baseline (flag, CRASHGATE_BASELINE, chaos_baseline): the gate fails only on new findings."""
    import os
    import subprocess

    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    known = tmp_path / "crashgate-baseline.json"
    wrote = subprocess.run([sys.executable, "-m", "chaos", "baseline", "--target", "quality.variants:MarkBeforeSend",
                            "--family", "sender", "--faults", "crash"], capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(tests_dir), tests_dir])))
    assert wrote.returncode == 0, wrote.stderr
    known.write_text(wrote.stdout)
    project.makepyfile(test_gate=MATRIX_TESTS)
    project.runpytest("--chaos-baseline", str(known)).assert_outcomes(passed=3)
    project.runpytest().assert_outcomes(passed=2, failed=1)  # without it, the weakness fails the gate
    bad = project.runpytest("--chaos-baseline", str(tmp_path / "missing.json"))
    assert bad.ret == 4 and "crashgate baseline (from command line --chaos-baseline)" in bad.stderr.str()


def test_a_junit_report_names_the_invariant_and_the_replay_command_of_a_failure(project, tmp_path):
    import xml.etree.ElementTree as ET

    project.makepyfile(test_gate=MATRIX_TESTS)
    xml = tmp_path / "junit.xml"
    project.runpytest(f"--junitxml={xml}").assert_outcomes(passed=2, failed=1)
    cases = {case.get("name"): case for case in ET.parse(xml).getroot().iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases["test_a_sender_that_marks_before_sending_is_caught"].iter("property")}
    assert "outbox-at-least-once" in props["crashgate_invariant"].split(","), props
    assert props["crashgate_replay"].startswith("python -m pytest test_gate.py::test_a_sender_that_marks_before_sending_is_caught --chaos-points")
    passing = {p.get("name") for p in cases["test_the_sender_survives_a_crash_at_every_line"].iter("property")}
    assert "crashgate_invariant" not in passing
