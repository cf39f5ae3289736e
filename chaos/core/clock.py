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
from typing import Callable

__all__ = ["SharedClock"]

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
