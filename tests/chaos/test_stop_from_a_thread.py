"""A worker stopped or abandoned on a thread of its own (the engine's step thread) stops there.

A worker frozen on a thread of its own stops there, not a little later.

The engine's step thread reaches pause points too. A SIGSTOP sent to the whole process goes to its
main thread, which stops the others asynchronously: the thread that asked to stop ran on for a
while first (in a pause matrix, sometimes far enough to make a paid call with its lease still
valid, and the pause ended differently from run to run). ``stop_here`` stops the thread it is
called on before it returns.
"""

from __future__ import annotations

import inspect
import mmap
import threading
import time

from chaos import ReferenceAdapter, run_matrix
from chaos.core.process import Exit, fork, stop_here

TRIES = 40


def _frozen_thread_ran_on(flag: mmap.mmap) -> bool:
    def body() -> None:
        def step() -> None:
            stop_here()
            flag[0] = 1  # must not run before the parent resumes the process

        thread = threading.Thread(target=step)
        thread.start()
        thread.join()

    flag[0] = 0
    child = fork(body)
    try:
        ended = child.wait(timeout_s=30)
        assert ended.exit is Exit.STOPPED, ended
        time.sleep(0.005)  # time enough for a thread that was not stopped to write
        ran_on = flag[0] == 1
        assert child.resume(timeout_s=30).exit is Exit.FINISHED
        assert flag[0] == 1, "the resumed thread did not finish"
        return ran_on
    finally:
        child.kill()


def test_a_thread_that_stops_itself_runs_no_further_until_resumed():
    flag = mmap.mmap(-1, 1)
    ran_on = sum(_frozen_thread_ran_on(flag) for _ in range(TRIES))
    assert ran_on == 0, f"{ran_on} of {TRIES} stopped threads ran on past stop_here()"


def _line_of(function, text: str) -> int:
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_inprocess_mode_abandons_the_worker_at_a_step_thread_line_outside_any_try():
    """In-process mode raises Abandon at the point. On the step thread's own loop, outside its
    ``try``, that ended the step thread alone, and the worker's thread waited for its step's result
    until the harness gave up on the child (900 s, at every such point). The worker's thread is
    abandoned with it now."""
    from engine._worker import _StepThread  # the line to abandon at, found by its text

    line = _line_of(_StepThread._loop, "self._results.put(result)")
    report = run_matrix(ReferenceAdapter(), families=["clean"], faults=["crash"], mode="inprocess", point=f"clean::_worker._loop:L{line}#2")
    (result,) = report.results
    assert result.outcome.exit == "killed", result.outcome
    assert result.outcome.held, result.outcome.violations


ABANDON_ON_A_THREAD = """
import threading
from chaos.core.kill import Abandon, Abandoning
try:
    with Abandoning("a point") as abandon:
        thread = threading.Thread(target=abandon, name="steps-w-doomed")  # a point on the engine's step thread
        thread.start()
        thread.join()
except Abandon:  # the worker's thread, signalled
    pass
thread.join()
def boom():
    raise ValueError("any other exception is still reported")
other = threading.Thread(target=boom)
other.start()
other.join()
"""


def test_a_thread_abandoned_at_a_point_ends_without_a_traceback():
    """In-process mode: each point on the step thread printed 'Exception in thread steps-w-doomed'
    and a traceback on stderr (some 140 lines in the benchmark's harness section)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", ABANDON_ON_A_THREAD], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "Abandon" not in out.stderr and "steps-w-doomed" not in out.stderr, out.stderr
    assert "ValueError: any other exception is still reported" in out.stderr


SIGNAL_LOST_BEFORE_THE_WAIT = """
import queue, signal, threading, time
from chaos.core.kill import Abandon, Abandoning
sent = []
deliver = signal.pthread_kill
def first_one_lost(thread, signum):
    # The first signal reaches the worker's thread after it let go of the interpreter and before
    # it blocks in its wait: it would be taken only when the wait ends. Here it is not delivered.
    sent.append(signum)
    if len(sent) > 1:
        deliver(thread, signum)
signal.pthread_kill = first_one_lost
results = queue.SimpleQueue()
started = time.monotonic()
try:
    with Abandoning("a point") as abandon:
        threading.Thread(target=abandon, name="steps-w-doomed").start()  # a point on the step thread
        results.get(timeout=60)  # the worker's thread, waiting for its step's result
except Abandon:
    print(f"abandoned after {time.monotonic() - started:.3f} s, {len(sent)} signals")
except queue.Empty:
    print(f"waited out its wait: {time.monotonic() - started:.3f} s")
"""


def test_a_worker_thread_that_misses_the_first_signal_is_abandoned_without_waiting_out_its_wait():
    """In-process mode, at a point on the step thread: a signal that reached the worker's thread
    just before it blocked was taken only when its wait for the step ended (10 s at a lost-lease
    point, where the worker waits a quarter of a heartbeat's interval). The signal is sent again
    until the thread takes it."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", SIGNAL_LOST_BEFORE_THE_WAIT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("abandoned after "), out.stdout + out.stderr
    seconds = float(out.stdout.split()[2])
    assert seconds < 30, out.stdout  # the wait is 60 s: abandoned at once, not when it ends
