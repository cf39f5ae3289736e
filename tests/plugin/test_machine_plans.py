"""Fault plans that name a fault of the machine: one item per sub-kind at each point where it can
show, scheduled as the crash matrix schedules it, explained like every other item when it fails,
and able to catch the planted bugs that only such a fault reveals."""

from __future__ import annotations

import os
import re
import shlex

import pytest

from chaos.core.libfiu import MISSING as LIBFIU_MISSING, missing as libfiu_missing

from .conftest import add_plan, collected_ids

MACHINE_ID = re.compile(r"^fault_plans/clocks\.toml::extract::_\w+\.\w+:L\d+#\d+@clock-(back|forward|skew)$")
CRASH_ID = re.compile(r"^fault_plans/clocks\.toml::extract::_\w+\.\w+:L\d+#\d+$")
CLOCKS = 'lesson = "Clocks jump."\n[points]\nsteps = ["extract"]\nfault = ["crash", "clock"]\n'


def _summary_line(out: str, kind: str) -> re.Match[str] | None:
    return re.search(rf"^(\d+) {kind} scenarios: (\d+) held, (\d+) violated; \d+ wasted calls; "
                     rf"the fault showed at (\d+), no effect at (\d+)", out, re.M)


def test_a_machine_fault_is_an_item_per_sub_kind_at_each_point_where_it_can_show(project):
    add_plan(project, "clocks", CLOCKS)
    ids = collected_ids(project.runpytest("--collect-only", "-q"))
    assert ids[0] == "fault_plans/clocks.toml::baseline"
    crashes = [i for i in ids[1:] if "@" not in i]
    machine = [i for i in ids[1:] if "@" in i]
    assert crashes and all(CRASH_ID.match(i) for i in crashes), crashes
    assert machine and all(MACHINE_ID.match(i) for i in machine), machine
    at = {}
    for i in machine:
        point, _, kind = i.partition("@")
        at.setdefault(point, set()).add(kind)
    assert all(kinds == {"clock-back", "clock-forward", "clock-skew"} for kinds in at.values()), at  # the kind's every sub-kind
    # Only where a clock is read or a statement sent, holding no transaction: a subset of the points.
    assert set(at) < set(crashes)
    one = machine[-1].split("::", 1)[1]  # GROUP::POINT@clock-skew, as --chaos-points takes it
    assert collected_ids(project.runpytest("--collect-only", "-q", "--chaos-points", one)) == [ids[0], machine[-1]]


def test_the_faults_setting_adds_a_machine_fault_to_plans_without_a_fault_key(project):
    add_plan(project, "outbox_crash")
    ids = collected_ids(project.runpytest("--collect-only", "-q", "--chaos-faults", "lock"))
    items = ids[1:]
    assert items and all(i.startswith("fault_plans/outbox_crash.toml::send::") and i.endswith("@lock-held") for i in items), items
    wrong = project.runpytest("--collect-only", "-q", "--chaos-faults", "crash,disk-empty")
    assert wrong.ret == pytest.ExitCode.USAGE_ERROR
    assert "has unknown kind 'disk-empty'" in wrong.stderr.str()


def test_the_disk_full_plan_holds_on_the_engine_and_catches_a_loop_that_dies_on_a_database_error(project):
    add_plan(project, "disk_full")
    held = project.runpytest()
    n = len(collected_ids(project.runpytest("--collect-only", "-q"))) - 1
    held.assert_outcomes(passed=1 + n)
    line = _summary_line(held.stdout.str(), "disk-full")
    assert line and line.group(1, 2, 3) == (str(n), str(n), "0"), held.stdout.str()
    assert int(line.group(4)) > 0, "the disk never filled where the worker needed a page"

    target = "quality.machine_variants:DiesOnDiskError"
    result = project.runpytest("--chaos-target", target, "-x")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert re.search(r"^disk-full at \S+ \(the job in '\w+'\): injected there, then removed; the same worker must survive it and drain$", out, re.M)
    assert "VIOLATED worker-survives: the worker process died: OperationalError: database or disk is full" in out
    assert "why it matters: Protects against a loop that dies on the first database error" in out
    assert "lesson: A full disk fails the transaction, never the worker" in out
    assert "the fault showed, though the worker's loop never reported an error from it" in out
    replay = re.search(r"^replay: (.*)$", out, re.M).group(1)
    assert re.fullmatch(rf"python -m pytest 'fault_plans/disk_full\.toml::\w+::\S+@disk-full' --chaos-mode fork --chaos-seed 0 "
                        rf"--chaos-target {re.escape(target)}", replay), replay
    again = project.runpytest(*shlex.split(replay)[3:])  # the one-line replay runs that one item, and it fails again
    again.assert_outcomes(failed=1)
    assert f"FAILED {shlex.split(replay)[3]}" in again.stdout.str()


def test_the_held_lock_plan_holds_on_the_engine_and_catches_a_claim_that_reads_busy_as_no_work(project):
    add_plan(project, "held_lock")
    n = len(collected_ids(project.runpytest("--collect-only", "-q"))) - 1
    project.runpytest("-n", "2").assert_outcomes(passed=1 + n)
    variant = ("--chaos-target", "quality.machine_variants:BusyMeansNoWork")
    n = len(collected_ids(project.runpytest("--collect-only", "-q", *variant))) - 1  # its own claim's lines are points too
    result = project.runpytest(*variant)
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == n and outcomes.get("passed") == 1, outcomes  # only the baseline holds
    out = result.stdout.str()
    line = _summary_line(out, "lock-held")
    assert line and line.group(1, 2, 3) == (str(n), "0", str(n)), out
    assert re.search(r"worker-survives\b.*the worker process survived but did not resume", out)  # as the finding (its items folded)


def _libfiu() -> None:
    reason = libfiu_missing()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)


IO_PLAN = 'lesson = "An I/O error is a failed transaction."\n[points]\nsteps = ["fetch"]\nfault = "io-eio"\nexpect = { state = "delivered" }\n'


def test_an_io_fault_runs_under_libfius_preload_and_the_engine_holds(project):
    _libfiu()
    add_plan(project, "eio", IO_PLAN)
    ids = collected_ids(project.runpytest("--collect-only", "-q"))
    assert len(ids) > 1 and all(i.endswith("@io-eio") for i in ids[1:]), ids
    result = project.runpytest("-n", "2")
    result.assert_outcomes(passed=len(ids))
    line = _summary_line(result.stdout.str(), "io-eio")
    n = len(ids) - 1
    # "showed" counts points where the worker's loop reported the injected EIO: only a process
    # running under fiu-run's preload can see one.
    assert line and line.group(1, 2, 4) == (str(n), str(n), str(n)), result.stdout.str()


def test_io_items_are_skipped_with_what_to_install_when_libfiu_is_missing(project, monkeypatch, tmp_path):
    add_plan(project, "eio", IO_PLAN)
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no fiu-run, no fiu-ctrl
    result = project.runpytest("-rs")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 1 and outcomes.get("skipped", 0) > 0 and "failed" not in outcomes, outcomes
    assert LIBFIU_MISSING[:60] in result.stdout.str()
