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
import faulthandler
import gc
import os
import pickle
import select
import signal
import struct
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

__all__ = ["Exit", "Ended", "Child", "ChildFailed", "Standby", "fork", "first_to_answer", "run_in_child", "tell", "stop_here", "die_here",
           "in_child", "ERROR_LINES_MAX", "WAIT_S_MAX", "TIMED_OUT", "Hung", "Stack", "watchdog", "STACKS_SIGNAL"]


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
    HUNG = "hung"  # did not finish within the scenario's bound (see watchdog): its stacks taken, then killed


ERROR_LINES_MAX = 12  # the last lines of a traceback a result keeps
WAIT_S_MAX = 900.0  # a child that neither ends nor stops by then is killed and reported
TIMED_OUT = "did not finish within"  # how the error of a child killed for running past its wait begins
# The signal that makes a watched child write every thread's stack (faulthandler, in C: it answers
# while the interpreter is blocked in a lock, a sleep or a query). A real-time signal where there
# is one, so that it meets no handler an engine installs for SIGUSR1 or SIGUSR2 (the inprocess
# kill uses SIGUSR1 itself, see chaos.core.kill.Abandoning).
STACKS_SIGNAL: int = signal.SIGRTMIN + 3 if hasattr(signal, "SIGRTMIN") else signal.SIGUSR2
STACKS_SIGNAL_NAME = "SIGRTMIN+3" if hasattr(signal, "SIGRTMIN") else "SIGUSR2"
STACKS_WAIT_S = 2.0  # how long a stuck child has to write its stacks before it is killed without them
STACKS_QUIET_S = 0.05  # a dump that has not grown for this long is whole
_FRAME = struct.Struct("!I")
_STOP = "stop"
_NOTE = "note"
_VALUE = "value"
_ERROR = "error"

_report_fd: int | None = None  # in a child: its end of the pipe
_watch: "_Watch | None" = None  # in the harness's process, while a scenario runs under watchdog()
_stacks_fd: int | None = None  # this process's file of stack dumps (O_APPEND), made at the first watched fork
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

    def __init__(self, pid: int, fd: int, what: str = "a child", group: bool = False) -> None:
        self.pid = pid
        self.what = what  # what it runs, as a finding names it ("the recovery, in a fresh process")
        self.group = group  # it leads a process group of its own: killed, it takes whatever it started along
        self.stopped = False  # frozen (SIGSTOP) at its point, waiting to be resumed
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
        the code under test is a finding, not a reason for the harness to hang too). A child forked
        under :func:`watchdog` is also waited for no longer than the scenario's bound: past it,
        :class:`Hung` is raised, with the stacks of every process of the scenario.
        """
        if self.ended is not None:
            return self.ended
        deadline = time.monotonic() + timeout_s
        watch = _watch if _watch is not None and self in _watch.children else None
        while True:
            left = deadline - time.monotonic()
            if watch is not None and watch.deadline - time.monotonic() <= 0:
                raise watch.expired(self)
            if left <= 0:
                self.kill()
                self.ended = Ended(Exit.ERROR, error=f"{TIMED_OUT} {timeout_s:.0f} s: killed", notes=self._take_notes())
                return self.ended
            ready, _, _ = select.select([self._fd], [], [], max(0.0, min(left, 1.0, watch.deadline - time.monotonic() if watch else 1.0)))
            if not ready:
                continue
            chunk = os.read(self._fd, 1 << 16)
            if not chunk:
                return self._reap()
            self._buffer += chunk
            if self._consume():
                status = self._waitpid(os.WUNTRACED)
                if os.WIFSTOPPED(status):
                    self.stopped = True
                    return Ended(Exit.STOPPED, notes=self._take_notes(), status=status)
                return self._finish(status)

    def resume(self, timeout_s: float = WAIT_S_MAX) -> Ended:
        """SIGCONT a stopped child, then wait for it as :meth:`wait` does."""
        self.stopped = False
        os.kill(self.pid, signal.SIGCONT)
        return self.wait(timeout_s)

    def kill(self) -> None:
        """SIGKILL the child (stopped or running) and reap it."""
        if self.ended is not None:
            return
        try:
            if self.group:
                os.killpg(self.pid, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._reap()

    def forget(self) -> None:
        """Close the pipe of a child the caller reaped itself (``os.waitpid`` on :attr:`pid`); what
        it left running in its process group is killed, as when the harness reaps it (the group's
        id stays taken while anything is left in it)."""
        if self.ended is None:
            self._end_group()
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
            status = self._waitpid(0)
        except ChildProcessError:
            status = 0
        return self._finish(status)

    def _waitpid(self, options: int) -> int:
        """``os.waitpid`` on the child, its status. A child that leads a process group takes the
        group along as it ends: whatever it started and left running is killed, while the ended
        leader, not yet reaped, still holds the group's id. A worker killed at its point leaves the
        worker it started meanwhile orphaned otherwise, still running on the scenario's files
        (which the next scenario makes again at the same paths)."""
        if self.group:
            seen = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT | (os.WSTOPPED if options & os.WUNTRACED else 0))
            if seen.si_code != os.CLD_STOPPED:
                self._end_group()
        return os.waitpid(self.pid, options)[1]

    def _end_group(self) -> None:
        """Kill what is left in the process group this child leads, if it leads one."""
        if self.group:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:  # nothing else was left in the group
                pass

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


def fork(body: Callable[[], Any], what: str = "a child") -> Child:
    """Fork a child that runs ``body()`` and sends back what it returns (or raises); it never
    returns into the caller's code (``os._exit``), whatever happens. ``what`` names what it runs,
    for a scenario that hangs in it (see :func:`watchdog`)."""
    global _report_fd, _watch
    watch = _watch
    if watch is not None:
        _stacks_file()
    read_fd, write_fd = os.pipe()
    gc.freeze()  # the child's collections then leave the parent's objects (and pages) alone
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            gc.disable()  # a short life: no collection copying pages it shares with the parent
            os.close(read_fd)
            _report_fd = write_fd
            _watch = None  # the parent's watch is the parent's: what this child forks stays in its group
            if watch is not None and _stacks_fd is not None:
                os.setpgid(0, 0)
                faulthandler.register(STACKS_SIGNAL, file=_stacks_fd, all_threads=True, chain=False)
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
    child = Child(pid, read_fd, what, group=watch is not None)
    if watch is not None:
        try:
            os.setpgid(pid, pid)  # the child does it too: whichever runs first, the group exists before a kill
        except OSError:  # the child did it first, or has ended already
            pass
        watch.children.append(child)
    return child


class Standby:
    """A child forked now that runs ``body`` only once :meth:`start` is called, and then waits for it.

    For work a child needs done later by a process as fresh as itself is now: forked before the
    child opens anything, the standby holds none of what the child builds afterwards (an engine a
    library keeps one of per process). If the child ends without starting it, the standby ends too,
    having run nothing (it reads the end of its pipe). It holds no copy of the child's own pipe to
    its parent, so that parent still sees the child's end as soon as it comes.

    >>> def child_body():
    ...     standby = Standby(lambda: os.getpid())
    ...     return standby.start().value != os.getpid()
    >>> fork(child_body).wait().value
    True
    """

    def __init__(self, body: Callable[[], Any], what: str = "a child on standby") -> None:
        go_read, go_write = os.pipe()
        inherited = _report_fd

        def waiting() -> Any:
            os.close(go_write)
            if inherited is not None:
                os.close(inherited)
            started = os.read(go_read, 1)
            os.close(go_read)
            return body() if started else None

        self.child = fork(waiting, what)
        os.close(go_read)
        self._go = go_write

    def start(self, timeout_s: float = WAIT_S_MAX) -> Ended:
        """Let the standby run its body, and wait for it as :meth:`Child.wait` does."""
        if self._go < 0:
            raise RuntimeError("a standby runs its body once")
        os.write(self._go, b"1")
        os.close(self._go)
        self._go = -1
        return self.child.wait(timeout_s)


@dataclass(frozen=True)
class Stack:
    """Every thread's stack of one process of a scenario that hung, as faulthandler wrote it."""

    process: str  # what it ran (the fork's ``what``)
    pid: int
    text: str  # faulthandler's dump (most recent call first), or why there is none


class Hung(BaseException):
    """A scenario's process did not finish within the scenario's bound (:func:`watchdog`).

    A BaseException, as KeyboardInterrupt is: it ends the scenario wherever the harness waits,
    whatever the scenario's own code catches (an adapter's error is an Exception, reported as one).
    """

    def __init__(self, what: str, bound_s: float, stacks: list[Stack]) -> None:
        self.what = what
        self.bound_s = bound_s
        self.stacks = stacks
        super().__init__(f"{what} did not finish within {bound_s:g} s")


@dataclass
class _Watch:
    bound_s: float
    deadline: float
    children: list[Child] = field(default_factory=list)

    def expired(self, waited: Child) -> Hung:
        """The bound has passed while ``waited`` ran: every thread's stack of each of the
        scenario's processes still running (``waited`` first), then all of them killed."""
        live = [waited] + [c for c in self.children if c is not waited and c.ended is None]
        stacks = [Stack(c.what, c.pid, _frozen_text() if c.stopped else _stacks_of(c.pid)) for c in live]
        for child in live:
            child.kill()
        return Hung(waited.what, self.bound_s, stacks)

    def close(self) -> None:
        """Kill what the scenario left running or frozen (it returned early, or was interrupted)."""
        for child in self.children:
            if child.ended is None:
                child.kill()


@contextmanager
def watchdog(bound_s: float) -> Iterator[None]:
    """Bound a scenario: every child forked inside is waited for until ``bound_s`` seconds after
    the start at most; past it, :class:`Hung` is raised with every thread's stack of each child
    still running, and those children are killed with whatever they started.

    Each child it forks leads a process group of its own (a worker that started another process
    takes it along when it is killed) and writes its threads' stacks when it gets
    :data:`STACKS_SIGNAL`. A watchdog inside another adds nothing: the outer bound holds.

    >>> with watchdog(0.5):
    ...     fork(lambda: time.sleep(60), "a sleeper").wait()
    Traceback (most recent call last):
    ...
    chaos.core.process.Hung: a sleeper did not finish within 0.5 s
    """
    global _watch
    if not bound_s > 0:
        raise ValueError(f"a scenario's bound must be a number of seconds > 0, not {bound_s!r}")
    if _watch is not None:
        yield
        return
    _watch = _Watch(bound_s, time.monotonic() + bound_s)
    try:
        yield
    finally:
        watch, _watch = _watch, None
        watch.close()


def _stacks_file() -> int:
    """This process's file of stack dumps: unlinked, shared with every child it forks. A dump
    moves the file's offset, which the children share, so dumps follow one another; each is read
    from where the file ended before it was asked for."""
    global _stacks_fd
    if _stacks_fd is None:
        import tempfile

        _stacks_fd, path = tempfile.mkstemp(prefix="crashgate-stacks-")
        os.unlink(path)
    return _stacks_fd


def _stacks_of(pid: int) -> str:
    """Ask ``pid`` for its threads' stacks and read them (see :data:`STACKS_SIGNAL`)."""
    fd = _stacks_file()
    start = os.fstat(fd).st_size
    try:
        os.kill(pid, STACKS_SIGNAL)
    except ProcessLookupError:
        return "(no stack: the process had ended)"
    deadline = time.monotonic() + STACKS_WAIT_S
    size = start
    while time.monotonic() < deadline:
        time.sleep(STACKS_QUIET_S)
        now = os.fstat(fd).st_size
        if now > start and now == size:
            break
        size = now
    text = os.pread(fd, size - start, start).decode("utf-8", "replace").rstrip()
    return text or f"(no stack: the process did not answer {STACKS_SIGNAL_NAME} within {STACKS_WAIT_S:g} s)"


def _frozen_text() -> str:
    return "(no stack: the harness froze it (SIGSTOP) at its point, as the scenario does)"


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
