"""A worker frozen on a thread of its own stops there, not a little later.

The engine's step thread reaches pause points too. A SIGSTOP sent to the whole process goes to its
main thread, which stops the others asynchronously: the thread that asked to stop ran on for a
while first (in a pause matrix, sometimes far enough to make a paid call with its lease still
valid, and the pause ended differently from run to run). ``stop_here`` stops the thread it is
called on before it returns.
"""

from __future__ import annotations

import mmap
import threading
import time

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
