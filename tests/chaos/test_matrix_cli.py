"""The crash matrix from the command line: its table, its JSON, its exit codes, its replay."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys

import pytest

from chaos import run_matrix


TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))


def run(*args):
    return subprocess.run([sys.executable, "-m", "chaos", "matrix", *args], capture_output=True, text=True, timeout=600, env=ENV)


def test_matrix_json_has_points_violations_coverage_and_per_point_results():
    out = run("--family", "sender", "--faults", "crash", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["points"] == len(report["results"]) > 10
    assert report["violations"] == 0
    assert 0 < report["coverage"]["percent"] <= 100
    first = report["results"][0]
    assert {"id", "fault", "file", "line", "source", "held", "violations", "wasted_calls", "replay"} <= set(first)
    assert first["replay"].startswith("python -m chaos matrix --target chaos:reference_adapter")


def test_a_violation_exits_1_and_prints_the_invariant_the_lesson_and_a_replay_command_that_reproduces_it():
    out = run("--target", "quality.variants:MarkBeforeSend", "--family", "sender", "--faults", "crash")
    assert out.returncode == 1
    assert re.search(r"^FINDING \d+: outbox-at-least-once", out.stdout, re.M)
    assert "lesson: A crash between delivering and marking re-delivers" in out.stdout
    replay = next(line for line in out.stdout.splitlines() if line.strip().startswith("replay:")).split("replay: ", 1)[1]
    again = subprocess.run(replay, shell=True, capture_output=True, text=True, timeout=600, env=ENV)
    assert again.returncode == 1
    assert "1 points in 1 families" in again.stdout
    assert re.search(r"^FINDING \d+: outbox-at-least-once", again.stdout, re.M)


def test_verbose_shows_every_point_with_its_source_line_and_outcome():
    out = run("--family", "sender", "--faults", "crash", "--verbose")
    assert out.returncode == 0
    rows = [line for line in out.stdout.splitlines() if line.startswith("crash ") and "::" in line]
    assert len(rows) > 10
    assert all(("held" in row) for row in rows)
    assert "crash coverage:" in out.stdout


def test_by_default_the_matrix_prints_a_summary_and_no_line_per_point():
    out = run("--family", "sender", "--faults", "crash")
    assert out.returncode == 0
    assert not [line for line in out.stdout.splitlines() if line.startswith("crash ") and "::" in line]
    assert "one per crash class" in out.stdout
    assert " points in 1 families (fork mode, seed 0): " in out.stdout.splitlines()[-1]


@pytest.mark.parametrize("jobs", ["0", "-5", "two"])
def test_a_number_of_processes_that_cannot_run_anything_exits_2(jobs):
    out = run("--family", "sender", "-n", jobs)
    assert out.returncode == 2
    assert "-n/--jobs" in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (("--family", "nope"), "no scenario family matches"),
        (("--faults", "melt"), "fault kinds ['melt'] are not known"),
        (("--point", "clean"), "must look like FAMILY::POINT"),
        (("--target", "nowhere:thing"), "cannot load target"),
    ],
)
def test_bad_input_exits_2_with_a_message_that_names_it(args, message):
    out = run(*args)
    assert out.returncode == 2
    assert message in out.stderr


def test_the_harness_restores_the_callers_trace_function_so_coverage_keeps_measuring():
    def tracer(frame, event, arg):
        return None

    sys.settrace(tracer)
    try:
        run_matrix(families=["sender"], faults=["crash"], mode="inprocess", sample=5)
        assert sys.gettrace() is tracer
    finally:
        sys.settrace(None)


def test_pause_and_interleave_results_carry_their_fault_kind_and_blocked_time():
    report = run_matrix(families=["sender"], faults=["pause", "interleave"], pairs=10)
    kinds = report.by_fault()
    assert {"pause-live", "pause-expired"} <= set(kinds)
    assert all(r.outcome.exit in ("paused", "interleaved", "not-reached") for r in report.results)
    assert report.violations == 0


def test_a_sample_of_the_matrix_keeps_every_fault_kind_it_asks_for():
    """One item of each kind is drawn first (chaos.core.sampling): uniformly, the few interleavings
    among many pause items were mostly left out of a small sample, without a word."""
    for seed in range(3):
        report = run_matrix(families=["clean"], faults=["pause", "interleave"], sample=3, pairs=2, seed=seed)
        assert sorted(r.fault for r in report.results) == ["interleave", "pause-expired", "pause-live"], seed


def test_coverage_is_not_claimed_for_a_run_that_stopped_at_no_line():
    """An interleaving run stops no worker at a line of its own choosing: it printed 0.0% coverage,
    listing as missed lines its findings showed reached."""
    done = subprocess.run([sys.executable, "-m", "chaos", "matrix", "-n", "1", "--family", "sender", "--faults", "interleave"],
                          capture_output=True, text=True, timeout=300)
    assert "crash coverage: not measured (it counts the lines a crash or a pause stopped at; this run: interleave)" in done.stdout
    assert "0.0%" not in done.stdout
    as_json = subprocess.run([sys.executable, "-m", "chaos", "matrix", "-n", "1", "--family", "sender", "--faults", "interleave", "--json"],
                             capture_output=True, text=True, timeout=300)
    assert json.loads(as_json.stdout)["coverage"]["measured"] is False
