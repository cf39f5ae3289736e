"""The terminal summary: points, held, violated, wasted calls, crash coverage, slowest points, a
line per fault kind; printed once, by the controller, counting every point also under pytest-xdist."""

from __future__ import annotations

import re

from .conftest import add_plan

MATRIX_TEST = '''
import pytest

@pytest.mark.crash_matrix(families=["sender"])
def test_the_sender_survives_a_crash_anywhere(crash_matrix):
    assert crash_matrix(points=4).points == 4
'''


def _summary(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"^=+ crashgate =+$", line))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("="))
    return [line for line in lines[start + 1 : end] if line]


def test_the_summary_counts_points_held_violated_wasted_coverage_scenarios_and_the_slowest(project):
    add_plan(project, "outbox_crash")
    add_plan(project, "double_submit")
    project.makepyfile(test_gate=MATRIX_TEST)
    result = project.runpytest("--chaos-points", "5")
    result.assert_outcomes(passed=1 + 5 + 1 + 2)
    summary = _summary(result.stdout.str())
    assert re.fullmatch(r"9 crash points: 9 held, 0 violated; \d+ wasted calls \(fork mode, seed 0\)", summary[0]), summary
    assert re.fullmatch(r"crash coverage: \d+\.\d% \(\d+ of the \d+ executable lines of the functions reached had a point killed\)", summary[1])
    assert summary[2] == "scenarios: 2 passed, 0 failed; baselines (no crash): 2 held, 0 violated"
    assert summary[3] == "slowest points:"
    assert all(re.fullmatch(r"  \d\.\d{3}s \S+::\S+( --chaos-points \S+)?", line) for line in summary[4:9]), summary
    assert len(summary) == 9


def test_the_summary_counts_each_fault_kind_beside_the_crashes(project):
    add_plan(project, "outbox_crash")
    project.makepyfile(test_gate=MATRIX_TEST)
    result = project.runpytest("--chaos-points", "6", "--chaos-faults", "crash,pause", "--chaos-mode", "inprocess")
    result.assert_outcomes(passed=8)
    summary = _summary(result.stdout.str())
    counts = {}
    for line in summary[:3]:
        m = re.fullmatch(r"(\d+) (crash points|pause-live scenarios|pause-expired scenarios): (\d+) held, 0 violated; \d+ wasted calls"
                         r"(?: \(\d+ without a valid lease\); other worker blocked \d+\.\d{3}s)?(?: \(inprocess mode, seed 0\))?", line)
        assert m, line
        assert m.group(1) == m.group(3)
        counts[m.group(2)] = int(m.group(1))
    assert list(counts) == ["crash points", "pause-live scenarios", "pause-expired scenarios"]  # crash first, then each pause
    assert sum(counts.values()) == 10  # six items of the plan, four of the matrix test
    assert summary[3].endswith("executable lines of the functions reached had a point killed or frozen)")


def test_under_xdist_each_point_is_a_test_and_the_controller_prints_one_summary_counting_them_all(project):
    add_plan(project, "outbox_crash")
    project.makepyfile(test_gate=MATRIX_TEST)
    args = ("--chaos-points", "6", "--chaos-mode", "inprocess", "--chaos-faults", "crash,pause")
    serial = project.runpytest(*args)
    spread = project.runpytest_subprocess("-n", "2", *args)
    serial.assert_outcomes(passed=8)
    spread.assert_outcomes(passed=8)
    out = spread.stdout.str()
    assert len(re.findall(r"=+ crashgate =+", out)) == 1
    assert "created: 2/2 workers" in out

    def counts(summary: list[str]) -> list[str]:  # the per-fault lines, without the blocked time (a duration)
        return [re.sub(r"blocked \d+\.\d+s", "blocked", line) for line in summary if re.match(r"\d+ (crash points|pause-)", line)]

    assert counts(_summary(out)) == counts(_summary(serial.stdout.str()))
    assert sum(int(line.split()[0]) for line in counts(_summary(out))) == 10
    assert [line.split(":")[0].split(" ", 1)[1] for line in counts(_summary(out))] == [
        "crash points", "pause-live scenarios", "pause-expired scenarios"]
