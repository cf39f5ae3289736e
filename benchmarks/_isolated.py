"""Run measurements in a fresh ``spawn`` process, so a peer's globals, threads and logging (or a
crashgate worker's memory) never touch the process that prints the table.

:func:`call_isolated` runs one function there. :class:`IsolatedSession` keeps a peer set up in
its own process and runs one measurement at a time on request, so the caller can alternate the
peer's runs with crashgate's and compare each pair taken under the same machine load.

>>> call_isolated("benchmarks._isolated", "_echo", {"value": 3}, timeout_s=60)
3
>>> with IsolatedSession("benchmarks._isolated", "_Doubler", {}, timeout_s=60) as s:
...     s.info, s.run(4)
({'ready': True}, 8)
"""

from __future__ import annotations

import importlib
import multiprocessing
import queue
from typing import Any

__all__ = ["call_isolated", "IsolatedSession", "IsolatedFailure"]

CLOSE_S_MAX = 30.0
REQUESTS_MAX = 10_000  # runs one session serves before it stops on its own


class IsolatedFailure(RuntimeError):
    """The measurement raised, or its process died or overran its time limit."""


def call_isolated(module: str, function: str, kwargs: dict[str, Any], *, timeout_s: float) -> Any:
    """``module.function(**kwargs)`` in a new process; its (picklable) return value."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    proc = ctx.Process(target=_child, args=(module, function, kwargs, results), daemon=True)
    proc.start()
    try:
        kind, value = _get(results, timeout_s, f"{module}.{function}")
    finally:
        _stop(proc)
    if kind == "error":
        raise IsolatedFailure(value)
    return value


class IsolatedSession:
    """``module.factory(**kwargs)`` built in a new process; ``run(arg)`` calls its ``run(arg)``.

    The object the factory returns needs ``info`` (a picklable dict), ``run(arg)`` and ``close()``.
    """

    def __init__(self, module: str, factory: str, kwargs: dict[str, Any], *, timeout_s: float) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._name = f"{module}.{factory}"
        self._timeout_s = timeout_s
        self._requests = ctx.Queue()
        self._replies = ctx.Queue()
        self._proc = ctx.Process(target=_serve, args=(module, factory, kwargs, self._requests, self._replies), daemon=True)
        self._proc.start()
        self.info: dict[str, Any] = self._reply()

    def run(self, arg: Any) -> Any:
        self._requests.put(("run", arg))
        return self._reply()

    def close(self) -> None:
        self._requests.put(("close", None))
        try:
            _get(self._replies, CLOSE_S_MAX, self._name)
        except IsolatedFailure:
            pass
        finally:
            _stop(self._proc)

    def __enter__(self) -> IsolatedSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _reply(self) -> Any:
        try:
            kind, value = _get(self._replies, self._timeout_s, self._name)
        except IsolatedFailure:
            _stop(self._proc)
            raise
        if kind == "error":
            _stop(self._proc)
            raise IsolatedFailure(value)
        return value


def _get(results: Any, timeout_s: float, name: str) -> tuple[str, Any]:
    try:
        return results.get(timeout=timeout_s)
    except queue.Empty:
        raise IsolatedFailure(f"{name} did not answer within {timeout_s:.0f}s") from None


def _stop(proc: Any) -> None:
    proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join(5)


def _error(exc: BaseException) -> tuple[str, str]:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return "error", f"{type(exc).__name__}: {text}"


def _child(module: str, function: str, kwargs: dict[str, Any], results: Any) -> None:
    try:
        value = getattr(importlib.import_module(module), function)(**kwargs)
    except BaseException as exc:  # the parent turns this into a one-line skip reason
        results.put(_error(exc))
    else:
        results.put(("value", value))


def _serve(module: str, factory: str, kwargs: dict[str, Any], requests: Any, replies: Any) -> None:
    try:
        session = getattr(importlib.import_module(module), factory)(**kwargs)
    except BaseException as exc:
        replies.put(_error(exc))
        return
    replies.put(("value", session.info))
    for _ in range(REQUESTS_MAX):
        command, arg = requests.get()
        if command == "close":
            session.close()
            replies.put(("value", None))
            return
        try:
            replies.put(("value", session.run(arg)))
        except BaseException as exc:
            replies.put(_error(exc))
            return
    session.close()


def _echo(value: Any) -> Any:
    return value


class _Doubler:
    """A session for the example above."""

    info = {"ready": True}

    def run(self, arg: int) -> int:
        return 2 * arg

    def close(self) -> None:
        return None
