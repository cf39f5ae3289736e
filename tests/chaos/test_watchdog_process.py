"""The watchdog of chaos.core.process, on real forks: a child past the bound leaves its stack and
is killed with what it started; a child a scenario leaves frozen or running is killed when the
scenario ends; a child that finishes in time is not touched; a child that ends, killed at its point
or finished, takes along what it started and left running (a worker killed at its point leaves the
worker it started meanwhile behind otherwise, still writing the scenario's files)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from chaos.core.process import Exit, Hung, die_here, fork, stop_here, watchdog

BOUND_S = 1.0
GONE_S_MAX = 10.0


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + GONE_S_MAX
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # reparented to us when this process is a subreaper; else init reaps it
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return False


def _sleeper_with_a_grandchild(path: str) -> None:
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    with open(path, "w") as f:
        f.write(str(grandchild.pid))
    time.sleep(3600)  # the stuck line


def test_a_child_past_the_bound_leaves_every_threads_stack_and_dies_with_the_process_it_started(tmp_path):
    path = str(tmp_path / "grandchild")
    started = time.monotonic()
    with pytest.raises(Hung) as hung:
        with watchdog(BOUND_S):
            fork(lambda: _sleeper_with_a_grandchild(path), "the sleeper").wait()
    assert time.monotonic() - started < BOUND_S + 15
    assert hung.value.what == "the sleeper" and hung.value.bound_s == BOUND_S
    (stack,) = hung.value.stacks
    assert stack.process == "the sleeper"
    assert "in _sleeper_with_a_grandchild" in stack.text and "test_watchdog_process.py" in stack.text, stack.text
    assert _gone(stack.pid)
    assert _gone(int(open(path).read())), "the process the stuck child started is killed with its process group"


def test_a_child_left_frozen_when_the_scenario_ends_is_killed(tmp_path):
    with watchdog(30.0):
        child = fork(stop_here, "the frozen one")
        assert child.wait().exit is Exit.STOPPED
    assert _gone(child.pid)


def test_a_child_that_finishes_in_time_is_untouched():
    with watchdog(30.0):
        ended = fork(lambda: 6 * 7, "quick").wait()
    assert (ended.exit, ended.value) == (Exit.FINISHED, 42)


def test_a_frozen_child_is_named_as_frozen_when_another_hangs():
    with pytest.raises(Hung) as hung:
        with watchdog(BOUND_S):
            frozen = fork(stop_here, "the frozen one")
            frozen.wait()
            fork(lambda: time.sleep(3600), "the waiter").wait()
    waiter, frozen_stack = hung.value.stacks
    assert waiter.process == "the waiter" and "in <lambda>" in waiter.text
    assert frozen_stack.process == "the frozen one" and "froze it (SIGSTOP)" in frozen_stack.text
    assert _gone(frozen.pid)


def _started_then(path: str, end: str) -> int:
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    with open(path, "w") as f:
        f.write(str(grandchild.pid))
    if end == "killed":
        die_here()  # SIGKILL, as the doomed worker dies at its point
    elif end == "frozen":
        stop_here()  # SIGSTOP, as a paused worker stops at its point
    return 42


@pytest.mark.parametrize("end, exit", [("killed", Exit.KILLED), ("finished", Exit.FINISHED)])
def test_a_child_that_ends_takes_what_it_left_running_along(tmp_path, end, exit):
    path = str(tmp_path / "grandchild")
    with watchdog(30.0):
        ended = fork(lambda: _started_then(path, end), "the doomed worker").wait()
        assert ended.exit is exit  # the child's own end is reported as it was, not as the group's kill
        assert _gone(int(open(path).read())), "what the ended child left running is killed as the child ends"


def test_a_frozen_child_keeps_what_it_started_until_the_scenario_ends(tmp_path):
    path = str(tmp_path / "grandchild")
    with watchdog(30.0):
        child = fork(lambda: _started_then(path, "frozen"), "the frozen one")
        assert child.wait().exit is Exit.STOPPED
        os.kill(int(open(path).read()), 0)  # frozen is not ended: what it started still runs
    assert _gone(child.pid) and _gone(int(open(path).read()))


def test_a_child_its_caller_reaped_itself_takes_what_it_left_running_along_when_forgotten(tmp_path):
    path = str(tmp_path / "grandchild")
    with watchdog(30.0):
        child = fork(lambda: _started_then(path, "killed"), "the doomed worker")
        _, status = os.waitpid(child.pid, 0)  # as the host faults reap their worker
        assert os.WIFSIGNALED(status)
        child.forget()
        assert _gone(int(open(path).read()))
