"""The harness's own figures for ``python -m benchmarks``: how fast crash-testing runs.

``rows(quick)`` returns table rows (``key``, ``label``, ``value``, ``unit``, ``note``). Quick
mode runs tiny samples so CI can smoke-test the code path; the real figures come from a full run.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from chaos.adapters.reference import ReferenceAdapter
from chaos.matrix.runner import run_matrix

__all__ = ["rows"]

QUICK_SAMPLE = 24
FULL_SAMPLE = 600
SPEED_FAMILY = "clean"


def _rate(report: Any) -> float:
    """Scenarios that ran per second (a pause point that shares its class's outcome did not run)."""
    ran = sum(row["run"] for row in report.by_fault().values())
    return ran / report.seconds if report.seconds else 0.0


WATCH_RUNS = 5  # alternate runs of each, with and without watching: the medians are compared


def watched_matrix(watch: bool, adapter: Any, **kwargs: Any) -> float:
    """Seconds of one crash matrix run with the scenario's watching (the audit hook of
    :mod:`chaos.core.effects`, the raise tracer of :mod:`chaos.core.raises`) on or off, in the
    pristine process that forks the scenarios (the flags are its, inherited by every fork)."""
    from chaos.core import effects, raises

    effects.ENABLED = raises.ENABLED = watch
    try:
        started = time.perf_counter()
        run_matrix(adapter, **kwargs)
        return time.perf_counter() - started
    finally:
        effects.ENABLED = raises.ENABLED = True


def _watch_row(adapter: Any, sample: int, *, runs: int) -> dict[str, Any]:
    """The crash matrix's wall time with watching over without, measured alternately in one run."""
    from chaos.core import pristine

    kwargs = dict(families=[SPEED_FAMILY], faults=["crash"], sample=sample, exhaustive=True)
    on: list[float] = []
    off: list[float] = []
    for _ in range(runs):
        off.append(pristine.call(watched_matrix, False, adapter, **kwargs))
        on.append(pristine.call(watched_matrix, True, adapter, **kwargs))
    with_s, without_s = statistics.median(on), statistics.median(off)
    return {"key": "watch_overhead_ratio", "label": "crash matrix wall time, effects and raises watched / not",
            "value": round(with_s / without_s, 3) if without_s else 0.0, "unit": "x",
            "note": f"medians of {runs} alternate runs of {sample} '{SPEED_FAMILY}' points: {with_s:.2f}s watched, {without_s:.2f}s not"}


def rows(quick: bool) -> list[dict[str, Any]]:
    """Scenarios per second per kill mode and fault kind, state-machine rules per second, and
    whole-matrix wall times."""
    sample = QUICK_SAMPLE if quick else FULL_SAMPLE
    adapter = ReferenceAdapter()
    out: list[dict[str, Any]] = []
    fork = run_matrix(adapter, families=[SPEED_FAMILY], faults=["crash"], sample=sample)
    inproc = run_matrix(adapter, families=[SPEED_FAMILY], faults=["crash"], sample=sample, mode="inprocess")
    pause = run_matrix(adapter, families=[SPEED_FAMILY], faults=["pause"], sample=sample, exhaustive=True)
    pairs = run_matrix(adapter, families=[SPEED_FAMILY], faults=["interleave"], pairs=sample)
    out += [
        {"key": "fork_scenarios_per_s", "label": "fork-mode crash scenarios/s, 1 core", "value": round(_rate(fork), 1), "unit": "scenarios/s",
         "note": f"{fork.points} points of the '{SPEED_FAMILY}' family"},
        {"key": "inprocess_scenarios_per_s", "label": "in-process crash scenarios/s, 1 core", "value": round(_rate(inproc), 1), "unit": "scenarios/s",
         "note": f"ratio to fork {(_rate(inproc) / _rate(fork)) if _rate(fork) else 0:.2f}x"},
        {"key": "pause_scenarios_per_s", "label": "fork-mode pause scenarios/s, 1 core", "value": round(_rate(pause), 1), "unit": "scenarios/s"},
        {"key": "interleave_pairs_per_s", "label": "two-level interleaving pairs/s, 1 core", "value": round(_rate(pairs), 1), "unit": "pairs/s",
         "note": f"{pairs.points} of {pairs.pairs_possible} possible pairs"},
    ]
    out.append(_watch_row(adapter, sample, runs=1 if quick else WATCH_RUNS))
    from chaos.machine import bench_rows as machine_rows  # imports Hypothesis: only when measured

    out += machine_rows(quick)
    if quick:
        return out
    crash_walls: dict[tuple[int, bool], tuple[float, Any]] = {}
    for jobs, exhaustive in ((1, False), (2, False), (2, True)):
        started = time.perf_counter()
        report = run_matrix(adapter, faults=["crash"], jobs=jobs, exhaustive=exhaustive)
        crash_walls[(jobs, exhaustive)] = (time.perf_counter() - started, report)
    for (jobs, exhaustive), (wall, report) in crash_walls.items():
        ran = report.by_fault()["crash"]["run"]
        how = "every point" if exhaustive else "one per crash class"
        note = f"{report.points} points, {ran} run ({how}), {report.violations} violations"
        if exhaustive:
            class_wall, class_report = crash_walls[(2, False)]
            class_ran = class_report.by_fault()["crash"]["run"]
            note += f"; {ran / max(1, class_ran):.1f}x the scenarios and {wall / class_wall:.1f}x the time of the class run"
        out.append({"key": f"crash_matrix_s_n{jobs}" + ("_every_point" if exhaustive else ""),
                    "label": f"full reference crash matrix, -n {jobs}, {how}", "value": round(wall, 1), "unit": "s", "note": note})
    walls = {}
    for exhaustive in (False, True):
        started = time.perf_counter()
        report = run_matrix(adapter, faults=["pause"], jobs=2, exhaustive=exhaustive)
        walls[exhaustive] = time.perf_counter() - started
        ran = sum(row["run"] for row in report.by_fault().values())
        how = "every point" if exhaustive else "one per pause class"
        note = f"{report.points} scenarios, {ran} run ({how}), {report.violations} violations"
        if exhaustive and walls[False]:
            note += f"; {walls[True] / walls[False]:.1f}x the class run"
        out.append({"key": "pause_matrix_s_n2" + ("_every_point" if exhaustive else ""),
                    "label": f"full reference pause matrix, -n 2, {how}", "value": round(walls[exhaustive], 1), "unit": "s", "note": note})
    return out
