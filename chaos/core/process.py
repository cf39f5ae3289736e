"""The process core: run code under test in a forked child, then kill, freeze or let it finish.

Everything the harness runs of an engine or a workflow (a setup, a recording, a doomed
iteration, a recovery, another worker meanwhile) runs in a child forked for it, never in the
harness's own process: a recovery then starts, as a real restart does, from a process that never
ran the doomed iteration and holds none of its memory (a module-level cache, a connection pool,
a half-built object). The harness's process only reads what outlives the children: the files,
the world's ledger, the shared clock.

A child reports through one pipe: notes on the way (:func:`tell`), then the value its body
returned or the exception it raised. It can stop itself (:func:`stop_here`, SIGSTOP) for the
parent to act while it is frozen, and :meth:`Child.resume` lets it go on. How it ended is one of
:class:`Exit`.

>>> child = fork(lambda: 6 * 7)
>>> ended = child.wait()
>>> ended.exit, ended.value
(<Exit.FINISHED: 'finished'>, 42)
>>> def body():
...     tell("half way")
...     raise KeyError("text")
>>> ended = fork(body).wait()
>>> ended.exit, ended.notes, ended.error.splitlines()[-1]
(<Exit.ERROR: 'error'>, ['half way'], "KeyError: 'text'")
"""

from __future__ import annotations

import ctypes
import enum
import gc
import os
import pickle
import select
import signal
import struct
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["Exit", "Ended", "Child", "ChildFailed", "fork", "first_to_answer", "run_in_child", "tell", "stop_here", "die_here", "in_child", "ERROR_LINES_MAX"]


class Exit(enum.StrEnum):
    """How a scenario's worker ended: the one vocabulary of the matrix, plans and histories."""

    FINISHED = "finished"  # its body returned
    CLEAN = "clean"  # the baseline: ran without any fault
    KILLED = "killed"  # SIGKILLed at its point
    NOT_REACHED = "not-reached"  # its iteration ended before the point
    STOPPED = "stopped"  # frozen (SIGSTOP) at its point, waiting to be resumed
    PAUSED = "paused"  # was frozen at its point, then resumed
    INTERLEAVED = "interleaved"  # two workers frozen and resumed in turn
    FAULTED = "faulted"  # met a fault of the machine at its point
    NO_EFFECT = "no-effect"  # the fault of the machine changed nothing there
    ERROR = "error"  # the code under test (or an adapter) raised
    DIED = "died"  # ended some other way (another signal, an exit of its own)


ERROR_LINES_MAX = 12  # the last lines of a traceback a result keeps
WAIT_S_MAX = 900.0  # a child that neither ends nor stops by then is killed and reported
_FRAME = struct.Struct("!I")
_STOP = "stop"
_NOTE = "note"
_VALUE = "value"
_ERROR = "error"

_report_fd: int | None = None  # in a child: its end of the pipe
_LIBC = ctypes.PyDLL(None, use_errno=True)  # libc, called without releasing the GIL
_LIBC.write.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)
_LIBC.write.restype = ctypes.c_ssize_t


@dataclass
class Ended:
    """What a child came back with."""

    exit: Exit
    value: Any = None
    error: str = ""  # the last lines of the traceback, when it raised
    notes: list[Any] = field(default_factory=list)
    status: int = 0


def in_child() -> bool:
    """Whether this process is a child forked by :func:`fork` (its body is running)."""
    return _report_fd is not None


def tell(note: Any) -> None:
    """From a child: send ``note`` (anything picklable) to the parent now."""
    if _report_fd is None:
        raise RuntimeError("tell() is for a child forked by chaos.core.process.fork")
    _write(_report_fd, (_NOTE, note))


def stop_here() -> None:
    """From a child: freeze (SIGSTOP) until the parent resumes it; the parent's :meth:`Child.wait`
    returns :attr:`Exit.STOPPED` meanwhile."""
    if _report_fd is None:
        raise RuntimeError("stop_here() is for a child forked by chaos.core.process.fork")
    # Nothing here lets another thread of the iteration (the engine's worker thread, handed a
    # step's result a moment ago) run on past the point: the note is written without letting go of
    # the interpreter (os.write would), and the stop is sent to this thread. A SIGSTOP sent to the
    # process goes to its main thread, which stops the others asynchronously: a step thread that
    # sent it ran on, on another core, for as long as that took (a paid call, sometimes).
    _write(_report_fd, (_STOP, None), keep_interpreter=True)
    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)


def die_here() -> None:
    """SIGKILL this process: no ``finally``, no ``atexit``, no context-manager exit."""
    os.kill(os.getpid(), signal.SIGKILL)


class Child:
    """A forked child and its pipe. Use :func:`fork` to make one."""

    def __init__(self, pid: int, fd: int) -> None:
        self.pid = pid
        self._fd = fd
        self._buffer = b""
        self._notes: list[Any] = []
        self._value: Any = None
        self._error = ""
        self._answered = False
        self.ended: Ended | None = None

    def wait(self, timeout_s: float = WAIT_S_MAX) -> Ended:
        """Read the child's pipe until it stops itself or ends; how it did.

        A child still running after ``timeout_s`` is killed and reported as an error (a hang in
        the code under test is a finding, not a reason for the harness to hang too).
        """
        if self.ended is not None:
            return self.ended
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                self.ended = Ended(Exit.ERROR, error=f"did not finish within {timeout_s:.0f} s: killed", notes=self._take_notes())
                return self.ended
            ready, _, _ = select.select([self._fd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(self._fd, 1 << 16)
            if not chunk:
                return self._reap()
            self._buffer += chunk
            if self._consume():
                _, status = os.waitpid(self.pid, os.WUNTRACED)
                if os.WIFSTOPPED(status):
                    return Ended(Exit.STOPPED, notes=self._take_notes(), status=status)
                return self._finish(status)

    def resume(self, timeout_s: float = WAIT_S_MAX) -> Ended:
        """SIGCONT a stopped child, then wait for it as :meth:`wait` does."""
        os.kill(self.pid, signal.SIGCONT)
        return self.wait(timeout_s)

    def kill(self) -> None:
        """SIGKILL the child (stopped or running) and reap it."""
        if self.ended is not None:
            return
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._reap()

    def forget(self) -> None:
        """Close the pipe of a child the caller reaped itself (``os.waitpid`` on :attr:`pid`)."""
        if self.ended is None:
            os.close(self._fd)
            self.ended = Ended(Exit.DIED)

    def _consume(self) -> bool:
        """Take every whole frame from the buffer; True when one was a stop."""
        stopped = False
        while len(self._buffer) >= _FRAME.size:
            (size,) = _FRAME.unpack_from(self._buffer)
            if len(self._buffer) < _FRAME.size + size:
                break
            kind, payload = pickle.loads(self._buffer[_FRAME.size : _FRAME.size + size])
            self._buffer = self._buffer[_FRAME.size + size :]
            if kind == _STOP:
                stopped = True
            elif kind == _NOTE:
                self._notes.append(payload)
            elif kind == _VALUE:
                self._value, self._answered = payload, True
            elif kind == _ERROR:
                self._error = payload
        return stopped

    def _take_notes(self) -> list[Any]:
        notes, self._notes = self._notes, []
        return notes

    def _reap(self) -> Ended:
        while True:
            try:
                chunk = os.read(self._fd, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            self._buffer += chunk
        self._consume()
        os.close(self._fd)
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:
            status = 0
        return self._finish(status)

    def _finish(self, status: int) -> Ended:
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            exit = Exit.KILLED
        elif self._error:
            exit = Exit.ERROR
        elif self._answered:
            exit = Exit.FINISHED
        else:
            exit = Exit.DIED
        self.ended = Ended(exit, self._value, self._error, self._take_notes(), status)
        return self.ended


def fork(body: Callable[[], Any]) -> Child:
    """Fork a child that runs ``body()`` and sends back what it returns (or raises); it never
    returns into the caller's code (``os._exit``), whatever happens."""
    global _report_fd
    read_fd, write_fd = os.pipe()
    gc.freeze()  # the child's collections then leave the parent's objects (and pages) alone
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            gc.disable()  # a short life: no collection copying pages it shares with the parent
            os.close(read_fd)
            _report_fd = write_fd
            value = body()
            # Without letting go of the interpreter: a thread the body left runnable (a step
            # thread handed a call just before the worker was abandoned) must not run again.
            _write(write_fd, (_VALUE, value), keep_interpreter=True)
            code = 0
        except BaseException as exc:  # reported to the parent: the child never returns
            lines = "".join(traceback.format_exception(exc)).rstrip().splitlines()
            try:
                _write(write_fd, (_ERROR, "\n".join(lines[-ERROR_LINES_MAX:])))
            except BaseException:
                pass
        finally:
            os._exit(code)
    gc.unfreeze()
    os.close(write_fd)
    return Child(pid, read_fd)


def first_to_answer(children: list[Child], timeout_s: float = WAIT_S_MAX) -> Child:
    """The first of ``children`` (each running) to write to its pipe or end: the one to
    :meth:`~Child.wait` for next, when several run at once and any may finish first."""
    if not children:
        raise ValueError("first_to_answer() needs at least one child")
    ready, _, _ = select.select([child._fd for child in children], [], [], timeout_s)
    return next((child for child in children if child._fd in ready), children[0])


def run_in_child(body: Callable[[], Any], *, what: str = "the code under test") -> Any:
    """Run ``body()`` in a child and return its value; re-raise what it raised as
    :class:`ChildFailed` with the child's traceback."""
    ended = fork(body).wait()
    if ended.exit is Exit.FINISHED:
        return ended.value
    raise ChildFailed(what, ended)


class ChildFailed(Exception):
    """A child did not return: it raised, was killed, or died."""

    def __init__(self, what: str, ended: Ended) -> None:
        self.ended = ended
        detail = ended.error or f"its process ended with status {ended.status}"
        super().__init__(f"{what} failed in its process ({ended.exit}):\n{detail}")


def _write(fd: int, message: tuple[str, Any], *, keep_interpreter: bool = False) -> None:
    """Send one framed message. ``keep_interpreter``: through libc's ``write`` called with the GIL
    held (ctypes.PyDLL), so that no other thread of this process runs meanwhile."""
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    data = _FRAME.pack(len(payload)) + payload
    if keep_interpreter:
        buffer = ctypes.create_string_buffer(data, len(data))
        done = 0
        while done < len(data):
            written = _LIBC.write(fd, ctypes.byref(buffer, done), len(data) - done)
            if written < 0:
                raise OSError(ctypes.get_errno(), "write to the harness's pipe failed")
            done += written
        return
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
