"""Where the user's code raised: the line behind a job that ended otherwise after a fault.

A step that reads state kept in process memory fails in the worker that recovers (``KeyError:
'order-1'``), and the engine stores the error's text as the job's ``last_error``. The engine's
lines are not where the bug is, and neither is the harness's: the user's is the innermost frame
of the user's code that the exception passed through. In a recovering worker (a forked child)
:func:`watch_raises` traces the frames of the user's code only (not their lines: their
exceptions) and records, in the world's ledger, each exception's text with that frame's
``path:line``; ``same-outcome`` names it beside the ``last_error`` it matches.

>>> is_users("/srv/app/orders.py"), is_users(os.__file__), is_users("<string>")
(True, False, False)
"""

from __future__ import annotations

import os
import sys
import threading
from types import CodeType, FrameType
from typing import Any, Callable

import engine

from chaos.core.origin import shown

__all__ = ["watch_raises", "RaiseNoter", "is_users", "RAISED_MAX"]

RAISED_MAX = 200  # exceptions one process records
ENABLED = True  # off only for the benchmark's side-by-side figure of what tracing costs (chaos.matrix.bench)
# The harness's folder (this module's package's parent) and the engine's: their frames are not the user's.
_OURS = tuple(os.path.dirname(os.path.abspath(path)) + os.sep
              for path in (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep + "__init__.py",
                           getattr(engine, "__file__", None) or "") if path)
_PYTHON = os.path.dirname(os.path.abspath(os.__file__)) + os.sep  # the library and its installed packages


def is_users(path: str) -> bool:
    """Whether code in ``path`` is the user's: not the harness's, the engine's or Python's."""
    return not (path.startswith(_OURS) or path.startswith(_PYTHON) or path.startswith("<"))


class RaiseNoter:
    """Told of a tracer's ``exception`` events, it records ``(error text, "path:line")`` the first
    time it sees an exception in a frame of the user's code (its innermost user frame: the event
    comes from the innermost frame outwards), at most :data:`RAISED_MAX` of them.

    Shared by :func:`watch_raises` and the line recorder of a family's run without any fault
    (:class:`chaos.core.points.Recorder`), which cannot leave the tracer to :func:`watch_raises`.
    """

    def __init__(self, record: Callable[[str, str], None]) -> None:
        self.record = record
        self.seen: dict[int, Any] = {}  # id -> the exception, kept alive so that its id is not reused meanwhile
        self.users: dict[CodeType, bool] = {}

    def watches(self, code: CodeType) -> bool:
        """Whether frames of ``code`` are the user's (remembered per code object)."""
        mine = self.users.get(code)
        if mine is None:
            mine = self.users[code] = is_users(code.co_filename)
        return mine

    def __call__(self, frame: FrameType, exc: BaseException) -> None:
        if len(self.seen) >= RAISED_MAX or id(exc) in self.seen or not self.watches(frame.f_code):
            return
        self.seen[id(exc)] = exc
        try:
            self.record(f"{type(exc).__name__}: {exc}", f"{shown(frame.f_code.co_filename)}:{frame.f_lineno}")
        except Exception:  # an exception whose str() raises, a ledger that cannot be written: not the step's concern
            pass


def watch_raises(record: Callable[[str, str], None]) -> bool:
    """In a child: record ``(error text, "path:line")`` for each exception raised through the
    user's code from now on, at its innermost user frame. False where a tracer is already set
    (a line recorder's: this process's exceptions are not traced then)."""
    from chaos.core.process import in_child

    if not in_child():
        raise RuntimeError("raises are traced in a forked child only")
    if sys.gettrace() is not None or not ENABLED:
        return False
    note = RaiseNoter(record)

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "exception":
            note(frame, arg[1])
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        if not note.watches(frame.f_code):
            return None
        frame.f_trace_lines = False  # exceptions only: no event per line
        return local

    threading.settrace(calls)  # the engine's step threads, started from now on
    sys.settrace(calls)
    return True
