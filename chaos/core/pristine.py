"""A pristine process: a fresh interpreter that forks a run's scenarios for a process that ran jobs.

Every process of a scenario (the worker killed or frozen, the one that recovers, the baseline) is
forked, and a fork inherits everything its parent holds: a module-level dict a step filled, a
cache, a connection pool. A test process runs the in-process sandbox (``chaos_world``, scripted
fault plans) and the user's own tests, which fill exactly those. A scenario forked from there
would start from a process that ran a job, and a step that relies on a module cache would pass
because an earlier test filled it: the verdict would depend on the order of the tests.

So the crash matrix and the fault plans' points run in a **server**: a new interpreter, started
once per test process on first use, that imports the harness and the target, never runs the code
under test in its own process, and forks every scenario from there. :func:`call` runs a
module-level function there and returns what it returned (or raises what it raised). A process
that is pristine itself (the server, ``python -m chaos``) runs the function directly.

A process that ran jobs in-process says so (:func:`taint`): a run that cannot be handed to the
server (an adapter that cannot be pickled) is refused there rather than forked from its memory
(:func:`chaos.matrix.runner.run_matrix`), so the mechanism that keeps scenarios pristine is not
bypassed silently.

>>> import operator
>>> call(operator.add, 2, 3)
5
"""

from __future__ import annotations

import atexit
import os
import pickle
import struct
import subprocess
import sys
import traceback
from typing import Any, Callable

__all__ = ["call", "stop", "is_pristine", "declare_pristine", "taint", "tainted", "ServerDied"]

ENV = "CRASHGATE_PRISTINE"  # set in the server's environment: the server is pristine
_FRAME = struct.Struct("!Q")
_OK = "ok"
_RAISED = "raised"

_PER_TEST = frozenset({"PYTEST_CURRENT_TEST"})  # pytest names the running test here: no reason to start afresh
_pristine = os.environ.get(ENV) == "1"
_taint = ""  # what ran jobs in this process ("" while none did); inherited by forks
_server: "_Server | None" = None


class ServerDied(RuntimeError):
    """The pristine server ended while it ran a call (killed, out of memory, a crash of its own)."""


def is_pristine() -> bool:
    """Whether this process may fork scenarios itself: it never ran the code under test."""
    return _pristine and not _taint


def declare_pristine() -> None:
    """Say that this process never ran jobs (an entry point such as ``python -m chaos``)."""
    global _pristine
    _pristine = True


def taint(what: str) -> None:
    """Say that this process runs jobs in-process (``what``, e.g. "the in-process sandbox")."""
    global _taint
    if not _taint:
        _taint = what


def tainted() -> str:
    """What ran jobs in this process ("" if nothing did)."""
    return _taint


def call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)`` run in a pristine process: here if this one is, else in the
    server (started on first use). ``function`` and its arguments are pickled, so the function
    must be a module-level one; what it raises is raised here."""
    global _server
    if is_pristine():
        return function(*args, **kwargs)
    if _server is not None and (not _server.alive() or _server.made_for != _surroundings()):
        _server.close()  # the caller's environment, import path or folder changed since: the scenarios see them as it does
        _server = None
    if _server is None:
        _server = _Server()
    return _server.call(function, args, kwargs)


def _surroundings() -> tuple[Any, ...]:
    """What a scenario's process takes from its caller besides the call: the environment, the
    import path, the working folder."""
    environ = tuple(sorted((k, v) for k, v in os.environ.items() if k not in _PER_TEST))
    return environ, tuple(sys.path), os.getcwd()


def stop() -> None:
    """Stop this process's server, if it started one (it also goes when this process ends)."""
    global _server
    if _server is not None:
        _server.close()
        _server = None


class _Server:
    """A pristine interpreter (``python -m chaos.core.pristine``) and the two pipes to it."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        self.made_for = _surroundings()
        to_server, self._requests = os.pipe()
        self._answers, from_server = os.pipe()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **{ENV: "1"})
        self.process = subprocess.Popen(
            [sys.executable, "-m", "chaos.core.pristine", str(to_server), str(from_server)],
            pass_fds=(to_server, from_server), env=env, close_fds=True,
        )
        os.close(to_server)
        os.close(from_server)
        atexit.register(self.close)

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.process.poll() is None

    def call(self, function: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        try:
            _send(self._requests, (function, args, kwargs))
            answer = _receive(self._answers)
        except (BrokenPipeError, EOFError):
            answer = None
        if answer is None:
            status = self.process.wait()
            self.close()
            raise ServerDied(f"the pristine process that runs the scenarios ended (status {status}) while it ran "
                             f"{getattr(function, '__qualname__', function)}; its error, if any, is printed above")
        kind, value = answer
        if kind == _RAISED:
            raise value
        return value

    def close(self) -> None:
        """Close the request pipe: the server ends after the call it runs, if any."""
        if self.owner != os.getpid():
            return
        for fd in (self._requests, self._answers):
            try:
                os.close(fd)
            except OSError:
                pass
        self._requests = self._answers = -1
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _send(fd: int, message: Any) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_FRAME.pack(len(payload)) + payload)
    while view:
        view = view[os.write(fd, view):]


def _receive(fd: int) -> Any:
    """One framed message, or None at the end of the pipe."""
    head = _read_exactly(fd, _FRAME.size)
    if head is None:
        return None
    (size,) = _FRAME.unpack(head)
    body = _read_exactly(fd, size)
    if body is None:
        return None
    return pickle.loads(body)


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks: list[bytes] = []
    left = size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _answer(function: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[str, Any]:
    try:
        return _OK, function(*args, **kwargs)
    except Exception as exc:  # raised in the caller's process, as if it had run there
        try:
            pickle.dumps(exc)
        except Exception:
            text = "".join(traceback.format_exception(exc)).rstrip()
            return _RAISED, RuntimeError(f"{type(exc).__name__} in the pristine process:\n{text}")
        return _RAISED, exc


def serve(requests: int, answers: int) -> int:
    """The server's loop: run each request, answer it; end when the owner closes the pipe."""
    while True:
        try:
            request = _receive(requests)
        except Exception as exc:  # a function or an argument this interpreter cannot import: the caller's error
            _send(answers, (_RAISED, RuntimeError(f"the pristine process could not load the call: {type(exc).__name__}: {exc}")))
            continue
        if request is None:
            return 0
        kind, value = _answer(*request)
        try:
            _send(answers, (kind, value))
        except Exception as exc:  # an answer that cannot be pickled: say so rather than hang the owner
            _send(answers, (_RAISED, RuntimeError(f"the pristine process's answer could not be sent back: {exc}")))


if __name__ == "__main__":
    try:
        sys.exit(serve(int(sys.argv[1]), int(sys.argv[2])))
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the owner says it, once
        sys.exit(130)
