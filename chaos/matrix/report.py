"""What a crash-matrix run reports: a result per scenario, the run's report, and the command that
replays one scenario.

A result names its family, its point (and the second point of an interleaving), the point's source
line and its outcome; the report adds the families' baselines, the lines a run could reach and the
coverage of those it stopped a worker at, and writes itself as JSON (``python -m chaos matrix
--json``).

>>> replay_command("chaos:reference_adapter", "fork", 0, "clean::_worker.run_once:L120#1")
"python -m chaos matrix --target chaos:reference_adapter --mode fork --seed 0 --faults crash --point 'clean::_worker.run_once:L120#1'"
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from chaos.core.points import Point
from chaos.core.scenario import PAUSE_KINDS, Outcome
from chaos.core.unreachable import declared_unreachable

__all__ = ["DEFAULT_FAULTS", "MatrixReport", "PointResult", "replay_command", "source_line"]

DEFAULT_FAULTS = ("crash", "pause")  # what a run stops workers with when it is told nothing


@dataclass
class PointResult:
    family: str
    point: Point
    source: str
    outcome: Outcome
    replay: str
    second: Point | None = None
    same_as: str = ""  # a point whose class ran at another point (for a crash, maybe of another family): that point's id

    @property
    def fault(self) -> str:
        return self.outcome.fault

    @property
    def id(self) -> str:
        suffix = f"+{self.second.id}" if self.second is not None else ""
        return f"{self.family}::{self.point.id}{suffix}"


@dataclass
class MatrixReport:
    target: str
    mode: str
    seed: int
    results: list[PointResult] = field(default_factory=list)
    baselines: dict[str, Outcome] = field(default_factory=dict)
    lessons: dict[str, str] = field(default_factory=dict)
    executable: dict[str, set[int]] = field(default_factory=dict)
    seconds: float = 0.0
    faults: tuple[str, ...] = DEFAULT_FAULTS
    pairs_possible: int = 0
    # The points a sample (``sample=N``) was drawn from; 0 when every point ran. The report says
    # "25 of 1,200", so a reader knows a line without points may simply not have been drawn.
    sampled_from: int = 0
    skipped: dict[str, str] = field(default_factory=dict)  # family -> why it does not apply to this workflow
    # The paid tasks the families' faults were armed on (None: any task), beside the ones the
    # baselines called: a task no fault reaches is one whose failures the run never tried.
    faulted_tasks: set[str | None] = field(default_factory=set)
    # What the run and the adapter declared is no effect on the world (chaos.core.effects), each
    # entry with who declared it: a hole in effects-through-outbox that the output must show.
    allowed_effects: list[tuple[str, str]] = field(default_factory=list)

    def unfaulted_tasks(self) -> list[str]:
        """The tasks the baselines called that no family's fault was armed on (none if no family
        armed a fault on a paid call, or one armed it on any task)."""
        if not self.faulted_tasks or None in self.faulted_tasks:
            return []
        called = {task for base in self.baselines.values() for task in base.tasks}
        return sorted(called - self.faulted_tasks)

    @property
    def points(self) -> int:
        return len(self.results)

    @property
    def violations(self) -> int:
        return sum(1 for r in self.results if not r.outcome.held) + sum(1 for b in self.baselines.values() if not b.held)

    @property
    def wasted_calls(self) -> int:
        return sum(r.outcome.wasted_calls for r in self.results)

    def exercised(self) -> dict[str, set[int]]:
        seen: dict[str, set[int]] = {}
        for r in self.results:
            if r.outcome.exit == "killed" or (r.fault in PAUSE_KINDS and r.outcome.exit == "paused" and not r.same_as):
                seen.setdefault(r.point.file, set()).add(r.point.line)
        return seen

    def coverage(self) -> dict[str, Any]:
        """Crash coverage: lines killed at least once / executable lines of the functions reached
        that an iteration can reach (``lines``). The lines an engine declares unreachable, with
        their reasons (:mod:`chaos.core.unreachable`), are ``declared``; any of them a scenario
        killed at after all is in ``declared_reached`` (the declaration is wrong); ``all_lines``
        and ``all_exercised`` count every executable line, declared or not."""
        exercised = self.exercised()
        declared = {f: {n: r for n, r in declared_unreachable(f).items() if n in lines} for f, lines in self.executable.items()}
        reachable = {f: lines - declared[f].keys() for f, lines in self.executable.items()}
        total = sum(len(lines) for lines in reachable.values())
        hit = sum(len(lines & exercised.get(f, set())) for f, lines in reachable.items())
        missed = {
            _short(f): sorted(lines - exercised.get(f, set()))
            for f, lines in sorted(reachable.items())
            if lines - exercised.get(f, set())
        }
        wrong = {_short(f): sorted(d.keys() & exercised.get(f, set())) for f, d in sorted(declared.items()) if d.keys() & exercised.get(f, set())}
        return {
            "lines": total,
            "exercised": hit,
            "percent": round(100.0 * hit / total, 1) if total else 100.0,
            "missed": missed,
            "declared": {_short(f): {str(n): r for n, r in sorted(d.items())} for f, d in sorted(declared.items()) if d},
            "declared_reached": wrong,
            "all_lines": sum(len(lines) for lines in self.executable.values()),
            "all_exercised": sum(len(lines & exercised.get(f, set())) for f, lines in self.executable.items()),
            # Only a run that stopped a worker at a line (a crash or a pause) measures it.
            "measured": bool({"crash", "pause"} & set(self.faults)) and bool(total),
        }

    def by_fault(self) -> dict[str, dict[str, int]]:
        """Scenarios, held and violated, per fault kind; ``run``: how many of them ran (the others
        are pause points that share a class with one that ran, see :func:`chaos.core.points.pause_classes`)."""
        out: dict[str, dict[str, int]] = {}
        for r in self.results:
            row = out.setdefault(r.fault, {"scenarios": 0, "run": 0, "held": 0, "violated": 0, "wasted_calls": 0})
            row["scenarios"] += 1
            row["run"] += 0 if r.same_as else 1
            row["held" if r.outcome.held else "violated"] += 1
            row["wasted_calls"] += r.outcome.wasted_calls
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "mode": self.mode,
            "seed": self.seed,
            "points": self.points,
            "faults": list(self.faults),
            "by_fault": self.by_fault(),
            "pairs_possible": self.pairs_possible,
            "violations": self.violations,
            "wasted_calls": self.wasted_calls,
            "seconds": round(self.seconds, 3),
            "coverage": self.coverage(),
            "unfaulted_tasks": self.unfaulted_tasks(),
            "allowed_effects": [{"effect": entry, "by": by} for entry, by in self.allowed_effects],
            "families": {
                name: {"lesson": self.lessons[name], "baseline": [str(v) for v in base.violations],
                       "skipped": self.skipped.get(name), "stacks": base.stacks}
                for name, base in self.baselines.items()
            },
            "results": [
                {
                    "id": r.id,
                    "fault": r.fault,
                    "family": r.family,
                    "file": _short(r.point.file),
                    "line": r.point.line,
                    "hit": r.point.hit,
                    "function": r.point.function,
                    "source": r.source,
                    "exit": r.outcome.exit,
                    "held": r.outcome.held,
                    "violations": [{"invariant": v.invariant, "detail": v.detail} for v in r.outcome.violations],
                    "wasted_calls": r.outcome.wasted_calls,
                    "zombie_calls": r.outcome.zombie_calls,
                    "blocked_s": round(r.outcome.blocked_s, 4),
                    "same_as": r.same_as or None,
                    "replay": r.replay,
                    "seconds": round(r.outcome.seconds, 5),
                    "lost_commits": r.outcome.lost_commits,  # taken by a power cut (chaos.hostfaults.power_faults)
                    "stacks": r.outcome.stacks,  # a scenario that hung: each process's stacks, the user's frames first
                }
                for r in self.results
            ],
        }


def replay_command(target: str, mode: str, seed: int, point_id: str, deep: bool = True, fault: str = "crash",
                   extra: tuple[str, ...] = ()) -> str:
    """The one command that re-runs exactly one scenario (``extra``: arguments it ends with)."""
    before, after = _replay_parts(target, mode, seed, deep, fault, tuple(extra))
    return before + shlex.quote(point_id) + after


@lru_cache(maxsize=64)
def _replay_parts(target: str, mode: str, seed: int, deep: bool, fault: str, extra: tuple[str, ...]) -> tuple[str, str]:
    """A replay command's text before and after its point id, quoted once for every point."""
    kind = "pause" if fault in PAUSE_KINDS else fault
    before = ["python", "-m", "chaos", "matrix", "--target", target, "--mode", mode, "--seed", str(seed), "--faults", kind, "--point"]
    after = ([] if deep else ["--shallow"]) + list(extra)
    return " ".join(shlex.quote(p) for p in before) + " ", "".join(" " + shlex.quote(p) for p in after)


def source_line(path: str, line: int) -> str:
    """The text of line ``line`` of ``path``, stripped ("" where there is none)."""
    import linecache

    return linecache.getline(path, line).strip()


def _short(path: str) -> str:
    cwd = os.getcwd()
    return os.path.relpath(path, cwd) if path.startswith(cwd) else path
