"""Time and randomness, passed in rather than hidden, so every run can be replayed.

The engine never calls ``time.time()`` or ``random`` itself: a worker gets a clock and an RNG.
Production uses :class:`SystemClock`; tests and the chaos harness use :class:`FakeClock`, which
only moves when told to.

>>> clock = FakeClock(start=100.0)
>>> clock.advance(5)
>>> clock.now()
105.0
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "SystemClock", "FakeClock"]


class Clock(Protocol):
    """Where the engine reads the time (seconds since the epoch, as a float)."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real wall clock."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


class FakeClock:
    """A clock that moves only when :meth:`advance` (or :meth:`sleep`) is called."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += float(seconds)

    def set(self, when: float) -> None:
        self._now = float(when)

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))
