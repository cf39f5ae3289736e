"""What every benchmark shares: the row it produces, medians, sizes, temporary databases, RSS.

A figure is always the median of several runs, and a comparison is always a ratio of two medians
measured in the same invocation: the machine is shared and noisy, so absolute numbers move between
runs while ratios taken side by side move much less.

>>> median([3.0, 1.0, 2.0])
2.0
>>> Row("x.rate", "a rate", 1234.5, "jobs/s").cells()[:3]
['a rate', '1,234', 'jobs/s']
"""

from __future__ import annotations

import atexit
import os
import platform
import resource
import shutil
import sqlite3
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Row", "Sizes", "median", "ratio", "temp_dir", "peak_rss_mib", "machine", "skipped"]


@dataclass
class Row:
    """One line of the table: a figure, its unit, optional per-step and per-job columns, a note."""

    key: str
    label: str
    value: float | None
    unit: str
    us_per_step: float | None = None
    commits_per_job: float | None = None
    note: str = ""
    skipped: str | None = None  # the one-line reason a row could not be measured
    runs: list[float] = field(default_factory=list)

    def cells(self) -> list[str]:
        if self.skipped is not None:
            return [self.label, "skipped", "", "", "", self.skipped]
        return [
            self.label,
            _fmt(self.value, self.unit),
            self.unit,
            _fmt(self.us_per_step, "us"),
            _fmt(self.commits_per_job, "commits"),
            self.note,
        ]

    def to_json(self) -> dict[str, Any]:
        if self.skipped is not None:
            return {"label": self.label, "unit": self.unit, "skipped": self.skipped}
        out: dict[str, Any] = {"label": self.label, "value": _round(self.value), "unit": self.unit}
        if self.us_per_step is not None:
            out["us_per_step"] = _round(self.us_per_step)
        if self.commits_per_job is not None:
            out["commits_per_job"] = _round(self.commits_per_job)
        if self.runs:
            out["runs"] = [_round(r) for r in self.runs]
        if self.note:
            out["note"] = self.note
        return out


@dataclass(frozen=True)
class Sizes:
    """How much work each benchmark does; ``quick`` is for the CI smoke run, not for figures."""

    quick: bool
    runs: int
    jobs: int  # reference jobs per end-to-end run at synchronous=NORMAL
    jobs_full: int  # ... at FULL, where every commit waits for an fsync
    cas_commits: int
    cas_commits_full: int
    peer_jobs: int
    dbos_jobs: int
    backlog_small: int
    backlog_large: int
    finished: int
    scaling_jobs: int  # jobs run (and topped up) per scaling measurement
    claims: int  # claims timed one by one per scaling measurement

    @classmethod
    def for_mode(cls, quick: bool, runs: int | None = None) -> Sizes:
        if quick:
            return cls(True, runs or 1, 20, 10, 200, 20, 20, 5, 100, 1_000, 1_000, 20, 20)
        return cls(False, runs or 5, 2_000, 500, 20_000, 2_000, 2_000, 300, 1_000, 100_000, 100_000, 500, 200)


def median(values: list[float]) -> float:
    if not values:
        raise ValueError("median of no runs: a benchmark must run at least once")
    return float(statistics.median(values))


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


@contextmanager
def temp_dir(prefix: str = "crashgate-bench-") -> Iterator[str]:
    """A fresh directory for one benchmark's databases, removed afterwards (whatever happens)."""
    path = tempfile.mkdtemp(prefix=prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def scratch(prefix: str) -> str:
    """A fresh directory for a peer's files, removed when this process exits (a peer object may
    outlive the block that made it, so :func:`temp_dir` does not fit)."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, True)
    return path


def peak_rss_mib() -> float:
    """This process's peak resident set size (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def machine() -> dict[str, Any]:
    """What the figures were measured on, printed above the table and stored in the JSON."""
    return {
        "system": platform.system(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
    }


def skipped(key: str, label: str, unit: str, reason: str) -> Row:
    return Row(key, label, None, unit, skipped=reason)


def _round(value: float | None) -> float | None:
    if value is None:
        return None
    if abs(value) >= 100:
        return round(value, 1)
    return round(value, 3)


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return ""
    if unit == "x":
        return f"{value:.2f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"
