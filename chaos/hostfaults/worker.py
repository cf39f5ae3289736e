"""The doomed worker's side of a machine fault: it meets the fault, survives it, and drains.

It runs in a process forked for one scenario (see :func:`chaos.hostfaults.faults.run_machine_fault`)
and talks to the harness only through a :class:`Page` of shared memory: a full disk or a failing
``write`` must not be able to silence it.
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import signal
import struct
import time
from collections.abc import Callable
from typing import Any

from engine import NO_PROGRESS, STORE_UNAVAILABLE

from chaos.core import libfiu
from chaos.core.store_faults import fill_disk
from chaos.core.points import Killer, Point
from chaos.core.freeze import short_busy
from chaos.core.kill import doomed_iteration
from chaos.core.settle import settle
from chaos.core.scenario import (
    EXIT_ERROR,
    EXIT_NOT_REACHED,
    Run,
)

__all__ = ["EXIT_DRAINED", "EXIT_STUCK", "IO_FAILURES", "Page", "SkewedClock", "doomed_worker", "drain", "working"]

FAULT_ITERATIONS = 3  # iterations the worker runs while the fault is still there
REMOVAL_WAIT_S_MAX = 30.0
# libfiu failure points (its POSIX preload wraps these calls) and the errno each returns.
IO_FAILURES: dict[str, tuple[tuple[str, int], ...]] = {
    "io-eio": (("posix/io/rw/write", errno.EIO), ("posix/io/rw/pwrite", errno.EIO),
               ("posix/io/sync/fsync", errno.EIO), ("posix/io/sync/fdatasync", errno.EIO)),
    "io-enospc": (("posix/io/rw/write", errno.ENOSPC), ("posix/io/rw/pwrite", errno.ENOSPC)),
}
EXIT_DRAINED = 0
EXIT_STUCK = 5
ERRORS = STORE_UNAVAILABLE  # what run_once answers when the database failed it


class Page:
    """Flags, counters and a note shared across fork, read and written without a system call.

    Memory, not a file: it keeps working while the worker's ``write`` calls fail.
    """

    _HEAD = struct.Struct("iiiid")  # phase, removed, store errors, note length, clock offset
    # Each field is written on its own: the harness and the worker write different fields at the
    # same time, and a read-modify-write of the whole head would put back a field the other had
    # just changed (a stale note length made the note unreadable).
    _FIELDS = tuple(struct.Struct(c) for c in "iiiid")
    _OFFSETS = (0, 4, 8, 12, 16)  # where native alignment puts each field of _HEAD (the double on 8 bytes)
    WAITING = 1
    NOTE_BYTES_MAX = 60_000

    def __init__(self) -> None:
        self._m = mmap.mmap(-1, self._HEAD.size + self.NOTE_BYTES_MAX)

    def _get(self) -> list[Any]:
        return list(self._HEAD.unpack_from(self._m, 0))

    def _set(self, index: int, value: Any) -> None:
        self._FIELDS[index].pack_into(self._m, self._OFFSETS[index], value)

    phase = property(lambda self: self._get()[0], lambda self, v: self._set(0, v))
    removed = property(lambda self: self._get()[1], lambda self, v: self._set(1, v))
    errors = property(lambda self: self._get()[2], lambda self, v: self._set(2, v))
    offset_s = property(lambda self: self._get()[4], lambda self, v: self._set(4, float(v)))

    def note(self, **values: Any) -> None:
        data = json.dumps({**self.read(), **values}).encode()[: self.NOTE_BYTES_MAX]
        self._m[self._HEAD.size : self._HEAD.size + len(data)] = data
        self._set(3, len(data))

    def read(self) -> dict[str, Any]:
        length = self._get()[3]
        return json.loads(self._m[self._HEAD.size : self._HEAD.size + length]) if length else {}


class SkewedClock:
    """The shared clock as one worker sees it: plus an offset only the harness changes."""

    def __init__(self, base: Any, page: Page) -> None:
        self.base = base
        self.page = page

    def now(self) -> float:
        return self.base.now() + self.page.offset_s

    def advance(self, seconds: float) -> None:
        self.base.advance(seconds)

    def sleep(self, seconds: float) -> None:
        self.base.advance(max(0.0, seconds))


def doomed_worker(run: Run, point: Point, only: Any, fault: str, page: Page) -> None:
    """The worker that meets ``fault`` at ``point``: it must survive it and drain once it is removed.

    Runs in the forked child and never returns. At the point it injects its own fault (disk-full,
    io-*) and stops itself, so that the harness can act (take the lock, jump the clock, damage a
    row); then it runs on :data:`FAULT_ITERATIONS` times with the fault present, notes what it
    interrupted, waits for the harness to remove the fault, and drains the database.
    """
    code = EXIT_ERROR
    try:
        if fault == "clock-skew":
            run.clock = run.world.clock = SkewedClock(run.clock, page)
        iteration = doomed_iteration(run)
        session = run.sessions[-1]
        if fault == "lock-held":
            short_busy(session)
        lifted: list[Callable[[], None]] = []

        def at_point() -> None:
            if fault == "disk-full":
                lifted.append(fill_disk(session))
            elif fault in IO_FAILURES:
                _fail_io(fault)
            os.kill(os.getpid(), signal.SIGSTOP)  # the harness acts, then lets it go on

        with Killer(run.adapter.trace_paths(), point, at_point, only) as killer:
            _count(page, iteration())
        if not killer.reached:
            os._exit(EXIT_NOT_REACHED)
        for _ in range(FAULT_ITERATIONS):
            _count(page, session.run_once())
            session.send_outbox()
        page.note(interruptions=sorted(working(run)))
        page.phase = Page.WAITING
        if fault == "lock-held" or fault in IO_FAILURES:
            _wait_for(lambda: page.removed == 1)
        for lift in lifted:
            lift()
        code = EXIT_DRAINED if drain(run, session) else EXIT_STUCK
    except BaseException as exc:  # reported through the page: a write may be what is failing
        page.note(error=f"{type(exc).__name__}: {exc}")
        code = EXIT_ERROR
    finally:
        os._exit(code)


def _count(page: Page, outcome: Any) -> None:
    if outcome in ERRORS:
        page.errors = page.errors + 1


def _fail_io(fault: str) -> None:
    """Make this process's writes fail from now on, through libfiu's preloaded wrappers."""
    libfiu.enable(IO_FAILURES[fault], fault)


def _wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + REMOVAL_WAIT_S_MAX
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the harness did not remove the fault within {REMOVAL_WAIT_S_MAX}s")
        time.sleep(0.001)


def working(run: Run) -> set[tuple[str, str]]:
    """(job, step) of every job in a working state: each may be paid for once more."""
    working = {w: step for step, (w, _) in run.adapter.step_states().items()}
    snapshot = run.adapter.inspect(run.db)
    return {(job_id, working[job.state]) for job_id, job in snapshot.jobs.items() if job.state in working}


def drain(run: Run, session: Any) -> bool:
    """Run ``session`` (and the sender) until every job settled, time passing every lease and
    backoff (one retry at a time in a paced family, as its recovery after a crash)."""
    _, _, settled = settle(session, lambda: run.adapter.inspect(run.db), run.adapter.settled_states(), run.clock,
                           gave_up=NO_PROGRESS | ERRORS, paced=run.scenario.paced)
    return settled
