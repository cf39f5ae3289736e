"""The gate on code that is not the reference engine's: a user's workflow with its own steps and
payloads. Each planted bug is one a user writes; the gate must fail it, naming the invariant, and
pass the correct workflow. Method: the crash matrix (and the CLI) on the adapters of
:mod:`quality.user_workflows`."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from chaos import run_matrix

from .user_workflows import InspectRaisesOnce, MemoryNotes, QuickNotes, ReadmeNotes, SecondAttemptNotes, UnmappedNotes

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _invariants(report):
    return {v.invariant for r in report.results for v in r.outcome.violations}


def test_the_correct_notes_workflow_completes_its_baseline_and_holds_everywhere():
    report = run_matrix(QuickNotes(), faults=["crash", "pause"])
    assert report.baselines["notes"].final_states == {"note-1": "notify_done"}
    assert report.baselines["notes"].effects, "the baseline delivered the email"
    assert report.points > 100
    assert report.violations == 0, sorted(_invariants(report))


def test_state_kept_in_process_memory_between_steps_is_caught_by_same_outcome():
    report = run_matrix(MemoryNotes(), faults=["crash"])
    assert report.baselines["notes"].held, "in one process, without a crash, the workflow works"
    bad = [r for r in report.results if not r.outcome.held]
    assert bad, "a crash after summarise, recovered in a fresh process, must fail classify"
    assert {v.invariant for r in bad for v in r.outcome.violations} == {"same-outcome"}
    detail = next(v.detail for r in bad for v in r.outcome.violations)
    assert "'failed_classify'" in detail and "KeyError" in detail and "'notify_done'" in detail


def test_a_step_that_answers_differently_on_its_second_attempt_is_caught_by_same_outcome():
    report = run_matrix(SecondAttemptNotes(), faults=["crash"])
    details = [v.detail for r in report.results for v in r.outcome.violations]
    assert details and all("same-outcome" == v.invariant for r in report.results for v in r.outcome.violations)
    assert any("with the result" in d or "another payload" in d for d in details), details[:3]
    # ... naming the field that differs, which leads to the step that computes it
    assert any("'note-1:email': field 'label' is 'retried' instead of " in d for d in details), details[:3]


def test_the_readme_workflow_with_the_default_payload_fails_its_baseline_with_one_clear_message():
    report = run_matrix(ReadmeNotes(), families=["clean"], faults=["crash"])
    base = report.baselines["clean"]
    assert not base.held and report.points == 0, "no green, and no points, without a completed baseline"
    (violation,) = base.violations
    assert violation.invariant == "baseline"
    assert "fails without any fault" in violation.detail
    assert "'failed_summarise'" in violation.detail and "KeyError: 'text'" in violation.detail
    # ... and the line of the user's step that raised it (run without any fault, under the recorder)
    assert re.search(r"KeyError: 'text'\", raised from \S*user_workflows\.py:111\)", violation.detail), violation.detail
    assert '{"source": "doc-1"}' in violation.detail and "payload(job_id)" in violation.detail


def test_the_matrix_command_exits_1_and_puts_the_baseline_failure_first():
    proc = subprocess.run(
        [sys.executable, "-m", "chaos", "matrix", "--target", "quality.user_workflows:ReadmeNotes", "--family", "clean"],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=TESTS), timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("FAILS WITHOUT ANY FAULT in 1 of 1 families (clean): family 'clean' fails"), lines[:3]
    assert "1 failing without any fault" in lines[-1]
    assert len(lines) < 40


def test_families_whose_faults_the_workflow_never_meets_are_skipped_not_passed():
    from chaos import reference_scenarios

    report = run_matrix(UnmappedNotes(), scenarios=reference_scenarios(), families=["extract-400", "verify-fail"], faults=["crash"])
    assert set(report.skipped) == {"extract-400", "verify-fail"}
    assert "never fired" in report.skipped["extract-400"]
    assert report.points == 0


def test_an_adapter_that_raises_at_one_point_gives_that_point_an_error_and_the_rest_runs():
    report = run_matrix(InspectRaisesOnce(), families=["clean"], faults=["crash"])
    ran = [r for r in report.results if not r.same_as]
    errors = [r for r in ran if r.outcome.exit == "error"]
    assert len(errors) == 1, [r.id for r in errors]
    (error,) = errors
    assert [v.invariant for v in error.outcome.violations] == ["raised"]
    assert "RuntimeError: inspect cannot read a job in 'extracting'" in error.outcome.error
    assert "--point" in error.replay
    assert all(r.outcome.held for r in ran if r is not error), "every other scenario still ran and held"


def test_a_fault_plan_on_the_memory_workflow_fails_its_points_with_same_outcome(pytester):
    """The same bug through the plugin: a plan with no expectations of its own, collected and run."""
    pytester.syspathinsert(TESTS)
    plans = pytester.path / "fault_plans"
    plans.mkdir()
    (plans / "notes.toml").write_text(
        'lesson = "A crash anywhere in a note\'s run changes its cost, never its outcome."\n\n[points]\njobs = ["note-1"]\n'
    )
    result = pytester.runpytest("--chaos-target", "quality.user_workflows:MemoryNotes", "--chaos-points", "all", "-q", "-p", "no:randomly")
    assert result.ret == 1
    out = result.stdout.str()
    assert "fault_plans/notes.toml::baseline PASSED" in out or "passed" in out
    assert "same-outcome" in out and "failed_classify" in out


def test_explore_catches_state_kept_in_memory_and_shrinks_it_to_one_interruption():
    from chaos import explore

    report = explore(MemoryNotes(), profile="ci", max_examples=60)
    assert not report.passed
    assert report.invariants == {"same-outcome"}
    assert "failed_classify" in report.failure
    # Shrunk to one step interrupted, so that a fresh process runs it again: a kill, a pause, or a
    # retryable fault on the adapter's own task (tasks() maps the reference's to the notes' steps),
    # whose retry runs in a process of its own.
    stops = [line for line in report.program
             if "kill=Kill(" in line or "event=Pause(" in line or re.search(r"event=Arm\(kind='(timeout|connection|server_error|rate_limit)'", line)]
    assert len(stops) == 1, report.program


def test_explore_refuses_to_pass_a_workflow_that_fails_without_any_fault():
    from chaos import explore

    report = explore(ReadmeNotes(), profile="ci", max_examples=5)
    assert not report.passed and report.examples == 0
    assert report.invariants == {"baseline"}
    assert "failed_summarise" in report.failure and "payload(job_id)" in report.failure


def test_a_plan_whose_jobs_end_in_a_failed_state_says_their_last_error(pytester):
    """A plan's expectation names the state it wanted, the state found and why the job is there."""
    pytester.syspathinsert(TESTS)
    plans = pytester.path / "fault_plans"
    plans.mkdir()
    (plans / "readme.toml").write_text(
        'lesson = "The README\'s workflow delivers every note."\n\n[[scenario]]\nname = "delivers"\n'
        'script = [{ submit = "note-1" }, { drain = true }]\nexpect = { state = "notify_done" }\n'
    )
    result = pytester.runpytest("--chaos-target", "quality.user_workflows:ReadmeNotes", "-q", "-p", "no:randomly")
    assert result.ret == 1
    out = result.stdout.str()
    assert "expected every job in 'notify_done', found {" in out and "'note-1': 'failed_summarise'}" in out, out
    assert "(last_error of 'doc-1': summarise: KeyError: 'text'; of 'note-1': summarise: KeyError: 'text')" in out


def test_a_scenario_plan_and_chaos_world_submit_the_adapters_own_payload(pytester):
    """A scripted scenario (its listed jobs, its default job, a submit without a payload) and the
    chaos_world fixture submit what the adapter's payload(job_id) gives, as the crash points do: with
    the reference's {"source": id} the notes workflow's first step fails every job."""
    pytester.syspathinsert(TESTS)
    plans = pytester.path / "fault_plans"
    plans.mkdir()
    (plans / "notes.toml").write_text(
        'lesson = "A note is summarised, classified and mailed once."\n\n'
        '[[scenario]]\nname = "listed"\njobs = ["note-7"]\nscript = [{ drain = true }]\n'
        'expect = { states = { note-7 = "notify_done" }, applied = 1 }\n\n'
        '[[scenario]]\nname = "default-job"\nscript = [{ drain = true }]\nexpect = { states = { doc-1 = "notify_done" } }\n\n'
        '[[scenario]]\nname = "submitted"\njobs = []\nscript = [{ submit = "note-8" }, { drain = true }]\n'
        'expect = { states = { note-8 = "notify_done" }, applied = 1 }\n'
    )
    pytester.makepyfile(test_world='''
def test_world_submits_the_adapters_payload(chaos_world):
    chaos_world.submit("note-9")
    chaos_world.drain()
    assert chaos_world.states() == {"note-9": "notify_done"}
    assert chaos_world.check() == []
''')
    result = pytester.runpytest("--chaos-target", "quality.user_workflows:QuickNotes", "-q", "-p", "no:randomly")
    result.assert_outcomes(passed=4)
