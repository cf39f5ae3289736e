"""A fake clock that a forked child and its parent share.

A paused worker must wake up to the time the rest of the world has reached, as a real process
frozen by SIGSTOP does: its clock lives in an anonymous shared memory page created before the
fork, so a child and its parent read and move the same "now".

>>> clock = SharedClock(10.0)
>>> clock.advance(5)
>>> clock.now()
15.0
"""

from __future__ import annotations

import mmap
import struct
import time
from enum import StrEnum
from typing import Any, Callable, TYPE_CHECKING

from chaos.core.declared import declared

if TYPE_CHECKING:
    from chaos.adapter import Adapter

__all__ = ["SharedClock", "AheadClock", "TimeSource", "time_source", "engine_reads"]

_SLOT = struct.Struct("d")


class SharedClock:
    """A FakeClock whose time is shared by every process forked after it was created."""

    def __init__(self, start: float) -> None:
        self._page = mmap.mmap(-1, _SLOT.size)  # MAP_SHARED | MAP_ANONYMOUS: survives fork shared
        # Called on every read and move of the time (a recording counts them; see chaos.core.points).
        self.observer: Callable[[], None] | None = None
        self.set(start)

    def now(self) -> float:
        if self.observer is not None:
            self.observer()
        return _SLOT.unpack_from(self._page, 0)[0]

    def peek(self) -> float:
        """The time, without telling the observer (the harness looking, not the code under test)."""
        return _SLOT.unpack_from(self._page, 0)[0]

    def set(self, when: float) -> None:
        if self.observer is not None:
            self.observer()
        _SLOT.pack_into(self._page, 0, float(when))

    def advance(self, seconds: float) -> None:
        self.set(self.now() + float(seconds))

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))


class AheadClock:
    """``base`` as a worker whose clock runs ``ahead_s`` ahead of the others' reads it: the skew
    between two machines' clocks. Moving it moves ``base``.

    >>> base = SharedClock(100.0)
    >>> ahead = AheadClock(base, 30.0)
    >>> ahead.advance(5)
    >>> ahead.now(), base.now()
    (135.0, 105.0)
    """

    def __init__(self, base: Any, ahead_s: float) -> None:
        self.base = base
        self.ahead_s = ahead_s

    def now(self) -> float:
        return self.base.now() + self.ahead_s

    def peek(self) -> float:
        return self.base.peek() + self.ahead_s

    def set(self, when: float) -> None:
        self.base.set(when - self.ahead_s)

    def advance(self, seconds: float) -> None:
        self.base.advance(seconds)

    def sleep(self, seconds: float) -> None:
        self.base.sleep(seconds)


class TimeSource(StrEnum):
    """Where an engine reads the time: the clock ``open()`` passes it, or the machine's."""

    PASSED = "passed"
    WALL = "wall"


def time_source(adapter: Adapter) -> TimeSource:
    """What ``adapter``'s engine reads the time from: its ``time_source`` ("passed", the default,
    or "wall": it calls ``time.time()``)."""
    return declared(adapter, "time_source", TimeSource, {
        TimeSource.PASSED: "the engine reads the clock open() passes it",
        TimeSource.WALL: "the engine calls time.time(); in each worker's process the harness makes it answer its clock",
    })


def engine_reads(adapter: Adapter, clock: Any) -> None:
    """In a worker's process (a forked child, never the test's own), point ``time.time`` at
    ``clock`` where the adapter declares ``time_source = "wall"``: leases, backoffs and deadlines
    the engine computes from the machine's time then follow the harness's clock, which moves past
    a lease or a backoff at once instead of waiting for it."""
    if time_source(adapter) is TimeSource.WALL:
        time.time = clock.now
