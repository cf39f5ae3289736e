"""The hook for the crash harness's own figures (crash scenarios/s, matrix wall time, rules/s).

``chaos.matrix.bench.rows(quick: bool) -> list[dict]`` is provided by the harness; each dict is one
table row with ``key`` (str), ``label`` (str), ``value`` (number) and ``unit`` (str), and may
carry ``note`` (str). If ``chaos.matrix.bench`` cannot be imported the table says so in one line (and
if its ``rows`` raises, says that in one line instead).

>>> rows, message = harness_rows(quick=True, importer=lambda name: None)
>>> rows, message
([], 'harness: skipped (chaos.matrix.bench not available)')
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ._measure import Row

__all__ = ["harness_rows", "SKIPPED"]

SKIPPED = "harness: skipped (chaos.matrix.bench not available)"


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def harness_rows(quick: bool, importer: Callable[[str], Any] = _import) -> tuple[list[Row], str | None]:
    """The harness's rows, or no rows and the one line that says why."""
    bench = importer("chaos.matrix.bench")
    if bench is None or not hasattr(bench, "rows"):
        return [], SKIPPED
    try:
        raw_rows = list(bench.rows(quick))
    except Exception as exc:  # the harness's failure must not take the engine's figures with it
        return [], f"harness: failed ({type(exc).__name__}: {exc})"
    rows = []
    for n, raw in enumerate(raw_rows):
        label = str(raw.get("label") or raw.get("key") or f"harness row {n + 1}")
        key = str(raw.get("key") or f"harness.{n + 1}")
        if not key.startswith("harness."):
            key = f"harness.{key}"
        value = raw.get("value")
        rows.append(
            Row(key, label, None if value is None else float(value), str(raw.get("unit", "")), note=str(raw.get("note", "")))
        )
    return rows, None
