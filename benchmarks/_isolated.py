"""Run one measurement in a fresh ``spawn`` process, so a peer's globals, threads and logging
(or a crashgate worker's memory) never touch the process that prints the table.

>>> call_isolated("benchmarks._isolated", "_echo", {"value": 3}, timeout_s=60)
3
"""

from __future__ import annotations

import importlib
import multiprocessing
import queue
from typing import Any

__all__ = ["call_isolated", "IsolatedFailure"]


class IsolatedFailure(RuntimeError):
    """The measurement raised, or its process died or overran its time limit."""


def call_isolated(module: str, function: str, kwargs: dict[str, Any], *, timeout_s: float) -> Any:
    """``module.function(**kwargs)`` in a new process; its (picklable) return value."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    proc = ctx.Process(target=_child, args=(module, function, kwargs, results), daemon=True)
    proc.start()
    try:
        try:
            kind, value = results.get(timeout=timeout_s)
        except queue.Empty:
            raise IsolatedFailure(f"{module}.{function} did not finish within {timeout_s:.0f}s") from None
    finally:
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    if kind == "error":
        raise IsolatedFailure(value)
    return value


def _child(module: str, function: str, kwargs: dict[str, Any], results: Any) -> None:
    try:
        value = getattr(importlib.import_module(module), function)(**kwargs)
    except BaseException as exc:  # the parent turns this into a one-line skip reason
        results.put(("error", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"))
    else:
        results.put(("value", value))


def _echo(value: Any) -> Any:
    return value
