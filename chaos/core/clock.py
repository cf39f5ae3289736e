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

import datetime as _datetime_module
import mmap
import struct
import sys
import time
from typing import Any, Callable, TYPE_CHECKING

from chaos.core.models import TimeSource, time_source

if TYPE_CHECKING:
    from chaos.core.target import Target

__all__ = ["SharedClock", "AheadClock", "ClockDatetime", "TimeSource", "time_source", "engine_reads"]

_SLOT = struct.Struct("d")
_REAL_DATETIME = _datetime_module.datetime


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


class _ClockDatetimeType(type):
    """The type of :class:`ClockDatetime`: every real datetime is an instance of it, so code that
    checks ``isinstance(value, datetime)`` after the swap still accepts the values it had."""

    def __instancecheck__(cls, value: Any) -> bool:
        return isinstance(value, _REAL_DATETIME)

    def __subclasscheck__(cls, klass: type) -> bool:
        return issubclass(klass, _REAL_DATETIME)


class ClockDatetime(_REAL_DATETIME, metaclass=_ClockDatetimeType):
    """``datetime.datetime`` in a worker's process whose engine reads the machine's time:
    ``now()`` and ``utcnow()`` read ``time.time()`` (the harness's clock there), where C's datetime
    reads the system's clock directly; ``today()`` already reads ``time.time()``. Everything it
    makes is a real ``datetime``, so nothing else changes (a pickle, a type check, a comparison).

    >>> type(ClockDatetime(2024, 5, 1)) is _datetime_module.datetime
    True
    >>> isinstance(_datetime_module.datetime(2024, 5, 1), ClockDatetime)
    True
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return _REAL_DATETIME(*args, **kwargs)

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return _REAL_DATETIME.fromtimestamp(time.time(), tz)

    @classmethod
    def utcnow(cls) -> Any:
        return _REAL_DATETIME.fromtimestamp(time.time(), _datetime_module.timezone.utc).replace(tzinfo=None)


def _datetime_reads_time() -> None:
    """Swap ``datetime.datetime`` for :class:`ClockDatetime` in this process: in the datetime
    module and in every module loaded that bound the class to a name of its own (``from datetime
    import datetime``). C's own module keeps it, and so does this one (``_REAL_DATETIME``), so that
    the real class still makes every datetime."""
    for name, module in list(sys.modules.items()):
        names = getattr(module, "__dict__", None)
        if name == "_datetime" or not isinstance(names, dict) or names is globals():
            continue
        for attribute, value in list(names.items()):
            if value is _REAL_DATETIME:
                names[attribute] = ClockDatetime


def engine_reads(target: Target, clock: Any) -> None:
    """In a worker's process (a forked child, never the test's own), point ``time.time`` at
    ``clock`` where the target declares ``time_source = "wall"``: leases, backoffs and deadlines
    the engine computes from the machine's time then follow the harness's clock, which moves past
    a lease or a backoff at once instead of waiting for it. ``datetime``'s ``now()`` and
    ``utcnow()`` follow it (:class:`ClockDatetime`); ``time.sleep`` is left alone, since the
    harness moves its clock itself and a sleep must still let the other threads run."""
    if target.time_source is TimeSource.WALL:
        time.time = clock.now
        _datetime_reads_time()
