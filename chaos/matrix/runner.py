"""The crash matrix: every point of every scenario family, killed, recovered and checked.

>>> report = run_matrix(families=["sender"], mode="inprocess", faults=["crash"])
>>> report.points > 0, report.violations
(True, 0)
"""

from __future__ import annotations

import os
import pickle
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Iterable

from chaos.adapter import REFERENCE_TARGET
from chaos.core.target import Target, load_target, resolve
from chaos.matrix.families import reference_scenarios
from chaos.hostfaults.power import power_missing
from chaos.core import effects, libfiu, pristine
from chaos.hostfaults.faults import KIND_OF, MACHINE_FAULTS, expand, machine_points, machine_scenarios, run_machine_fault, start_preloaded
from chaos.core.store_faults import small_pages
from chaos.core.world import STORE_FAULT_KINDS
from chaos.core.points import Point, warm
from chaos.core.sampling import sample_every_kind
from chaos.core.hangs import check_timeout
from chaos.core.unreachable import declared_unreachable
from chaos.core.process import Exit
from chaos.core.scenario import (
    AT_START, PAUSE_KINDS, Family, Outcome, Scenario, for_adapter,
)
from chaos.core.freeze import run_interleaving, run_pause
from chaos.core.kill import run_point
from chaos.core.settle import recovery_key
from chaos.core.template import discard
from chaos.core.verdict import compared
from chaos.core.prepare import prepare

__all__ = [
    "MatrixReport",
    "MatrixUsageError",
    "PREPARE",
    "PointResult",
    "Share",
    "run_matrix",
    "replay_command",
    "DEFAULT_SEED",
    "DEFAULT_FAULTS",
    "FAULTS",
    "PAIRS_DEFAULT",
    "adopt",
    "interleave_pairs",
    "run_chunk",
    "scratch_dir",
    "source_line",
]

DEFAULT_SEED = 0
CHUNK_POINTS = 64
# Machine faults (disk, io, lock, clock, damage) name several sub-kinds each; a sub-kind
# (e.g. clock-skew) is accepted on its own too, as a replay command names it.
FAULTS = ("crash", "pause", "interleave") + tuple(MACHINE_FAULTS)
DEFAULT_FAULTS = ("crash", "pause")
PAIRS_DEFAULT = 200
# Fork from a lean worker process once the caller is this heavy (and the run is this long).
LEAN_RSS_MB_MAX = 60
LEAN_ITEMS_MIN = 48


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


Work = tuple[str, str, int, int]  # (fault, family, point index, second point index or -1)


@dataclass
class Share:
    """What a process running work items needs besides the items: the adapter, the prepared
    families and the run's settings; cut down by :meth:`for_items` to what given items need."""

    adapter: Any
    families: dict[str, Family]
    workdir: str
    seed: int
    mode: str
    deep: bool
    points: dict[tuple[str, int], Point] = field(default_factory=dict)  # (family, point index) -> the point, once cut

    def for_items(self, chunks: list[list[Work]]) -> "Share":
        """This share cut down to what ``chunks`` need, for the process that runs them: the
        families without what only preparing and reporting read (every point, the lines reached,
        the classes: tens of thousands of objects on a full matrix), and only the items' points.
        Every scenario forks from that process, and a fork costs in proportion to its memory."""
        lean = {name: replace(family, points=[], executable={}, between=[], classes=[], crash_classes=[])
                for name, family in self.families.items()}
        needed = {(name, i) for chunk in chunks for _, name, index, second in chunk for i in (index, second) if i >= 0}
        return replace(self, families=lean, points={(name, i): self.families[name].points[i] for name, i in needed})


# The share of the work items this process runs, cut for them (see adopt).
_share: Share | None = None
PREPARE = "prepare"  # what a zygote's input starts with when it is to prepare families (chaos.matrix.zygote)


def run_chunk(items: list[Work]) -> list[tuple[Work, Outcome]]:
    if _share is None:
        raise RuntimeError("run_chunk() runs the work of a matrix: adopt() its share first")
    adapter, families, points, seed, mode, deep = _share.adapter, _share.families, _share.points, _share.seed, _share.mode, _share.deep
    out = []
    scratch = tempfile.mkdtemp(dir=_share.workdir)
    for item in items:
        fault, name, index, second = item
        family: Family = families[name]
        point = points[(name, index)]
        if fault == "crash":
            outcome = run_point(adapter, family, point, scratch, seed=seed, mode=mode, deep=deep)
        elif fault in PAUSE_KINDS:
            outcome = run_pause(adapter, family, point, scratch, seed=seed, expired=fault == PAUSE_KINDS[1], deep=deep)
        elif fault in KIND_OF:
            outcome = run_machine_fault(adapter, family, point, scratch, seed=seed, fault=fault, deep=deep)
        else:
            outcome = run_interleaving(adapter, family, point, points[(name, second)], scratch, seed=seed, deep=deep)
        out.append((item, outcome))
    return out


def _setup(target: Any, *, mode: str, families: Iterable[str] | None, point: str | None, scenarios: list[Scenario] | None,
           faults: tuple[str, ...], db: str | None, replay_db: tuple[str, ...] | None) -> "_Setup":
    """Everything a run is given checked, and its adapter and families: a :class:`ValueError` here
    is the caller's input (a fault kind, a point, a family, a target, a declaration), never the run's."""
    if not faults:  # a run of nothing would report no violation: a gate that passes having checked nothing
        raise ValueError(f"no fault kind given; pass at least one of: {', '.join(FAULTS)}, e.g. crash")
    if point is not None and not point:
        raise ValueError("point '' names no scenario; pass FAMILY::POINT as a replay command prints it, or no point at all")
    unknown = sorted(set(faults) - set(FAULTS) - set(KIND_OF))
    if unknown:
        raise ValueError(f"fault kinds {unknown} are not known; choose from: {', '.join(FAULTS)} (or a sub-kind: {', '.join(KIND_OF)})")
    machine = [sub for f in faults for sub in expand(f)]
    from chaos.hostfaults.faults import refuse_on_a_server, refuse_without_schema

    if isinstance(target, str):
        refuse_on_a_server(machine, db)  # disk and io act on SQLite files; lock, clock and damage run on PostgreSQL too
    if any(KIND_OF[sub] == "io" for sub in machine) and libfiu.missing():
        raise ValueError(libfiu.missing())
    if any(KIND_OF[sub] == "power" for sub in machine) and power_missing():
        raise ValueError(power_missing())
    if "crash" in faults and mode not in ("fork", "inprocess"):
        raise ValueError(f"mode {mode!r} is not one of: fork, inprocess")
    # The door: the target loaded and resolved once (its declared words, its submit_conflict, its
    # allowed_effects and its scenario_timeout_s checked); nothing below asks the adapter again.
    adapter = load_target(target) if isinstance(target, str) else resolve(target)
    raw = adapter.adapter
    target_name = target if isinstance(target, str) else f"{type(raw).__module__}:{type(raw).__name__}"
    if not isinstance(target, str):
        refuse_on_a_server(machine, db, adapter)
    if db is not None:
        if adapter.use_database is None:
            raise ValueError(f"target {target_name!r} takes no --db: its scenario databases are files")
        adapter.use_database(db)
    refuse_without_schema(machine, adapter, target_name, db)
    if adapter.check_declaration is not None:  # a declaration that does not match the engine: the adapter's mistake, said before any run
        adapter.check_declaration()
    replay_extra = replay_db if replay_db is not None else (("--db", db) if db is not None else ())
    all_scenarios = scenarios if scenarios is not None else (adapter.scenarios or reference_scenarios)()
    all_scenarios = [for_adapter(s, adapter) for s in all_scenarios]
    if scenarios is None and machine:
        all_scenarios = list(all_scenarios) + [for_adapter(s, adapter) for s in machine_scenarios()
                                               if s.name not in {a.name for a in all_scenarios}]
    wanted = set(families) if families is not None else None
    only_family, _, only_point = (point or "").partition("::")
    if point and not only_point:
        raise ValueError(f"point {point!r} must look like FAMILY::POINT, e.g. clean::_worker.run_once:L120#1")
    chosen = [s for s in all_scenarios if (wanted is None or s.name in wanted) and (not point or s.name == only_family)]
    if not chosen:
        names = ", ".join(s.name for s in all_scenarios)
        if point and wanted is not None and only_family not in wanted and only_family in {s.name for s in all_scenarios}:
            raise ValueError(f"point {point!r} is in family {only_family!r}, which the families asked for ({', '.join(sorted(wanted))}) "
                             "leave out; give the point alone, or its family")
        raise ValueError(f"no scenario family matches {sorted(wanted or {only_family})}; families: {names}")
    return _Setup(adapter, target_name, chosen, tuple(replay_extra), only_family, only_point)


@dataclass(frozen=True)
class _Setup:
    adapter: Target
    target_name: str
    chosen: list[Scenario]
    replay_extra: tuple[str, ...]
    only_family: str
    only_point: str


class MatrixUsageError(ValueError):
    """What :func:`run_matrix` was given cannot be run (the message names the input and the fix)."""


def run_matrix(
    target: str = REFERENCE_TARGET,
    *,
    mode: str = "fork",
    seed: int = DEFAULT_SEED,
    deep: bool = True,
    families: Iterable[str] | None = None,
    point: str | None = None,
    sample: int | None = None,
    jobs: int = 1,
    scenarios: list[Scenario] | None = None,
    workdir: str | None = None,
    faults: Iterable[str] = ("crash",),
    pairs: int = PAIRS_DEFAULT,
    db: str | None = None,
    replay_db: tuple[str, ...] | None = None,
    exhaustive: bool = False,
    allowed_effects: Iterable[str] = (),
    scenario_timeout_s: float | None = None,
) -> MatrixReport:
    """Run the matrix for ``target`` (``module:attr`` or an adapter object).

    ``faults`` picks the fault kinds: ``crash`` (kill at each point), ``pause`` (freeze at each
    point while another worker runs, its lease valid and expired), ``interleave`` (two-level
    interleavings of two workers, a seeded sample of ``pairs`` pairs), and the faults of the
    machine (``disk``, ``io``, ``lock``, ``clock``, ``damage``, or one of their sub-kinds, see
    :mod:`chaos.hostfaults.faults`), which also add their own family. ``point`` (``family::id``)
    runs one scenario; ``sample`` a seeded sample of N points; ``jobs`` > 1 spreads the work over
    that many processes. ``db`` is the database server of an adapter whose scenario databases
    are not files (``postgresql://...`` for ``chaos:postgres_adapter``); ``replay_db`` the
    arguments replay commands name it by (default ``--db <db>``).

    Pauses run once per pause class, the points with no visible operation between them (see
    :func:`chaos.core.points.pause_classes`): every point gets a result, those of a class share the
    outcome of its first point, named in ``same_as``. ``exhaustive`` pauses at every point, and
    so does a ``sample`` (of points, each one run). Crashes always run at every point.

    ``allowed_effects``: what the steps do that is no effect on the world (``file:GLOB``,
    ``connect:HOST:PORT``, ``subprocess:GLOB``, besides the adapter's ``allowed_effects``); every
    other effect a step has outside the outbox fails ``effects-through-outbox`` (see :mod:`chaos.core.effects`).

    ``scenario_timeout_s``: how long one scenario (and one family's setup and baseline) may run
    before it is a ``hangs`` finding, its processes' stacks taken and the processes killed, and
    the run goes on (default: the adapter's ``scenario_timeout_s``, else 60 s; a family's points
    get at least ten times its baseline's time, see :mod:`chaos.core.hangs`).
    """
    if not pristine.is_pristine():
        # Fork the scenarios from a process that never ran a job (chaos.core.pristine): this one
        # may have run the in-process sandbox, or the user's own tests, which fill the very module
        # caches a crash must empty.
        arguments = dict(mode=mode, seed=seed, deep=deep, families=families, point=point, sample=sample, jobs=jobs, scenarios=scenarios,
                         workdir=workdir, faults=tuple(faults), pairs=pairs, db=db, replay_db=replay_db, exhaustive=exhaustive,
                         allowed_effects=tuple(allowed_effects), scenario_timeout_s=scenario_timeout_s)
        unshippable = _unshippable(target, arguments)
        if not unshippable:
            return pristine.call(run_matrix, target, **arguments)
        try:  # what it was given is said first, as the pristine process would
            _setup(target, mode=mode, families=families, point=point, scenarios=scenarios, faults=tuple(faults), db=db, replay_db=replay_db)
        except MatrixUsageError:
            raise
        except ValueError as exc:
            raise MatrixUsageError(str(exc)) from exc
        if pristine.tainted():
            raise MatrixUsageError(f"{unshippable}, so its scenarios would be forked from this process, which ran jobs "
                                   f"({pristine.tainted()}); name the adapter by its 'module:attribute' instead")
        warnings.warn(f"{unshippable}: its scenarios are forked from this process, and start with whatever this process "
                      "holds in memory; name the adapter by its 'module:attribute' so that they start from a fresh process",
                      RuntimeWarning, stacklevel=2)
    started = time.perf_counter()
    faults = tuple(faults)
    try:
        setup = _setup(target, mode=mode, families=families, point=point, scenarios=scenarios, faults=faults, db=db, replay_db=replay_db)
    except MatrixUsageError:
        raise
    except ValueError as exc:
        raise MatrixUsageError(str(exc)) from exc
    try:
        allowed = effects.parse_allowed(allowed_effects)
        if scenario_timeout_s is not None:
            scenario_timeout_s = check_timeout(scenario_timeout_s, "scenario_timeout_s")
    except ValueError as exc:
        raise MatrixUsageError(str(exc)) from exc
    adapter, target_name, chosen = setup.adapter, setup.target_name, setup.chosen
    replay_extra = setup.replay_extra + (("--scenario-timeout", f"{scenario_timeout_s:g}") if scenario_timeout_s is not None else ())
    owned = workdir is None
    workdir = workdir or scratch_dir()
    try:
        with effects.allowing(str(entry) for entry in allowed):
            report = _run(adapter, target_name, chosen, workdir, mode=mode, seed=seed, deep=deep, point=point, only_family=setup.only_family,
                          only_point=setup.only_point, sample=sample, jobs=jobs, faults=faults, pairs=pairs, started=started,
                          replay_extra=replay_extra, exhaustive=exhaustive, timeout_s=scenario_timeout_s)
            report.allowed_effects = ([(str(a), "the run") for a in allowed]
                                      + [(str(a), "the adapter") for a in adapter.allowed_effects])
            if families is None and not point:  # a part of the matrix leaves out faults the rest would arm: nothing to say then
                report.faulted_tasks = {f.task for s in chosen for f in s.faults if f.kind not in STORE_FAULT_KINDS and f.task not in ("send", AT_START)}
        return report
    finally:
        if owned:
            shutil.rmtree(workdir, ignore_errors=True)


def _unshippable(target: Any, arguments: dict[str, Any]) -> str:
    """Why ``target`` and ``arguments`` cannot be handed to a pristine process ("" if they can)."""
    try:
        pickle.loads(pickle.dumps((target, arguments)))  # both ways: an object may pickle and not load
    except Exception as exc:
        shown = target if isinstance(target, str) else f"{type(target).__module__}:{type(target).__qualname__}"
        return f"the adapter {shown!r} (or a scenario given with it) cannot be pickled ({type(exc).__name__}: {exc})"
    return ""


def _run(adapter: Target, target_name: str, chosen: list[Scenario], workdir: str, *, mode: str, seed: int, deep: bool, point: str | None,
         only_family: str, only_point: str, sample: int | None, jobs: int, faults: tuple[str, ...], pairs: int, started: float,
         replay_extra: tuple[str, ...] = (), exhaustive: bool = False, timeout_s: float | None = None) -> MatrixReport:
    prepared: dict[str, Family] = {}
    try:
        return _run_prepared(adapter, target_name, chosen, workdir, prepared, mode=mode, seed=seed, deep=deep, point=point,
                             only_family=only_family, only_point=only_point, sample=sample, jobs=jobs, faults=faults, pairs=pairs,
                             started=started, replay_extra=replay_extra, exhaustive=exhaustive, timeout_s=timeout_s)
    finally:
        for family in prepared.values():
            discard(adapter, family)  # an adapter's template database (PostgreSQL); files go with the workdir


def _run_prepared(adapter: Target, target_name: str, chosen: list[Scenario], workdir: str, prepared: dict[str, Family], *, mode: str,
                  seed: int, deep: bool, point: str | None, only_family: str, only_point: str, sample: int | None, jobs: int,
                  faults: tuple[str, ...], pairs: int, started: float, replay_extra: tuple[str, ...],
                  exhaustive: bool = False, timeout_s: float | None = None) -> MatrixReport:
    report = MatrixReport(target_name, mode, seed, faults=faults)
    work: list[Work] = []
    # (class kind, family, first point of its class): the class's other points, which share its outcome.
    members: dict[tuple[str, str, int], list[int]] = {}
    one_per_class = not exhaustive and not point and sample is None  # a sample is of points, each run
    rng = random.Random(seed)
    machine_names = {s.name for s in machine_scenarios()}  # those families are for machine faults
    families = _prepare_all(adapter, chosen, workdir, seed=seed, deep=deep, jobs=jobs, machine_names=machine_names, timeout_s=timeout_s)
    for scenario, family in zip(chosen, families):
        machine_only = scenario.name in machine_names
        prepared[scenario.name] = family
        report.baselines[scenario.name] = family.baseline
        if family.skipped:
            report.skipped[scenario.name] = family.skipped
        report.lessons[scenario.name] = scenario.lesson
        for f, lines in family.executable.items():
            report.executable.setdefault(f, set()).update(lines)
        singles = [i for i, p in enumerate(family.points) if not point or p.id == only_point]
        for fault in faults:
            if fault == "crash" and not machine_only:
                # In-process mode runs ``finally`` blocks after the point, which may write: every point runs.
                classes = family.crash_classes if one_per_class and mode == "fork" else []
                work += [("crash", scenario.name, i, -1) for i in _firsts(scenario.name, "crash", singles, classes, members)]
            elif fault == "pause" and not machine_only:
                classes = family.classes if one_per_class else []
                work += [(kind, scenario.name, i, -1) for i in _firsts(scenario.name, "pause", singles, classes, members)
                         for kind in PAUSE_KINDS]
            elif expand(fault):
                at = [i for i in machine_points(family, source_line) if i in set(singles)]
                work += [(sub, scenario.name, i, -1) for i in at for sub in expand(fault)]
        if "interleave" in faults and not machine_only:
            found, possible = interleave_pairs(family, point and only_point, pairs, rng)
            report.pairs_possible += possible
            work += [("interleave", scenario.name, i, j) for i, j in found]
    if point and not work and all(f.completed for f in prepared.values()):
        raise MatrixUsageError(f"point {point!r} is not a crash point of family {only_family!r} (replay with the same code and seed)")
    if sample is not None and sample < len(work):
        report.sampled_from = len(work)
        work = sorted(work[k] for k in sample_every_kind(work, sample, random.Random(seed), kind=lambda w: w[0]))
    share = Share(adapter, prepared, workdir, seed, mode, deep)
    # Run under libfiu's preload: the io faults of the host, and every point of a family whose
    # doomed iteration meets an I/O error.
    fiu_families = {name for name, family in prepared.items() if family.scenario.needs_libfiu()}
    preloaded = [w for w in work if KIND_OF.get(w[0]) == "io" or w[1] in fiu_families]
    work = [w for w in work if not (KIND_OF.get(w[0]) == "io" or w[1] in fiu_families)]
    order = {item: n for n, item in enumerate(work + preloaded)}
    # A crash class that leaves what one of another family leaves, recovered alike, is not run again.
    across = _across_families(work, prepared) if one_per_class and mode == "fork" else {}
    under_fiu = start_preloaded(share, preloaded)  # runs meanwhile
    done = _execute(share, _chunks([w for w in work if w not in across], jobs), jobs)
    shared, ran_for = _shared_across(share, across, dict(done), adapter)
    done += shared
    done += under_fiu.result() if under_fiu is not None else []
    done.sort(key=lambda pair: order[pair[0]])  # reported in the order of the families and their points
    for item, outcome in done:
        fault, name, index, second = item
        p = prepared[name].points[index]
        q = prepared[name].points[second] if second >= 0 else None
        result = PointResult(name, p, source_line(p.file, p.line), outcome, "", q, same_as=ran_for.get(item, ""))
        result.replay = replay_command(target_name, mode, seed, result.id, deep, fault, replay_extra)
        report.results.append(result)
        if fault in PAUSE_KINDS or fault == "crash":
            for other in members.get(("pause" if fault in PAUSE_KINDS else "crash", name, index), []):
                o = prepared[name].points[other]
                same = PointResult(name, o, source_line(o.file, o.line), _shared_outcome(outcome, o.id), "", None, same_as=result.id)
                same.replay = replay_command(target_name, mode, seed, same.id, deep, fault, replay_extra)
                report.results.append(same)
    report.seconds = time.perf_counter() - started
    return report


def _across_families(work: list[Work], families: dict[str, Family]) -> dict[Work, Work]:
    """The crash items whose kill leaves exactly what an earlier item's kill in another family
    leaves (the files' content and the clock, see :class:`chaos.core.points.DurableState`), to be
    recovered alike (:func:`chaos.core.settle.recovery_key`): each -> the item that runs for it.
    Families prepared alike (the same template, the same clock) share the points before their
    own fault first shows."""
    first: dict[Any, Work] = {}
    across: dict[Work, Work] = {}
    for item in work:
        fault, name, index, _ = item
        content = families[name].crash_contents.get(index) if fault == "crash" else None
        if content is None:
            continue
        key = (content, recovery_key(families[name]))
        if key in first:
            across[item] = first[key]
        else:
            first[key] = item
    return across


def _shared_across(share: Share, across: dict[Work, Work], done: dict[Work, Outcome],
                   adapter: Any) -> tuple[list[tuple[Work, Outcome]], dict[Work, str]]:
    """The outcomes of the items of ``across``, and the id of the point that ran for each: its
    runner's outcome, compared with its own family's baseline; an item whose runner was not killed
    at its point (it raised first, say) is run after all."""
    out: list[tuple[Work, Outcome]] = []
    ran_for: dict[Work, str] = {}
    again: list[Work] = []
    for item, ran in across.items():
        outcome = done[ran]
        if outcome.exit != Exit.KILLED:
            again.append(item)
            continue
        family = share.families[item[1]]
        shared = _shared_outcome(outcome, family.points[item[2]].id)
        shared.violations = [v for v in outcome.violations if v.invariant != "same-outcome"] + compared(family, shared, adapter)
        out.append((item, shared))
        ran_for[item] = f"{ran[1]}::{share.families[ran[1]].points[ran[2]].id}"
    if again:
        out += _execute(share, [again], 1)
    return out, ran_for


def _shared_outcome(outcome: Outcome, point_id: str) -> Outcome:
    """The outcome of a class's first point, as another point of the class reports it: a shallow
    copy, as :func:`dataclasses.replace` makes, without running ``__init__`` for each of thousands."""
    shared = object.__new__(Outcome)
    shared.__dict__.update(outcome.__dict__, point=point_id, seconds=0.0)
    return shared


def _prepare_all(adapter: Target, chosen: list[Scenario], workdir: str, *, seed: int, deep: bool, jobs: int,
                 machine_names: set[str], timeout_s: float | None = None) -> list[Family]:
    """Prepare every family (its template, recording and baseline), ``jobs`` at a time, each in a
    child of its own when there are several; in order. The files the points are in are parsed
    here first, so that no recording child parses them again; the families recorded under fiu-run
    start before, their process parsing them meanwhile."""

    def one(scenario: Scenario) -> Family:
        chosen_adapter = small_pages(adapter) if scenario.name in machine_names else adapter
        return prepare(chosen_adapter, scenario, workdir, seed=seed, deep=deep, timeout_s=timeout_s)

    # A family whose doomed iteration meets an I/O error is recorded in a process started by
    # fiu-run (where libfiu is missing, or the adapter's databases are on a server, prepare says
    # why it is skipped).
    under_fiu = [s for s in chosen if s.needs_libfiu() and not libfiu.missing() and adapter.server is None]
    if under_fiu:
        preparing = libfiu.UnderFiu("chaos.matrix.zygote", (PREPARE, (adapter, under_fiu, workdir, seed, deep, timeout_s)), workdir,
                                    "fiu-prepare")
        rest = _prepare_all(adapter, [s for s in chosen if s not in under_fiu], workdir, seed=seed, deep=deep, jobs=jobs,
                            machine_names=machine_names, timeout_s=timeout_s)
        by_name = {family.scenario.name: family for family in rest}
        by_name.update(zip((s.name for s in under_fiu), preparing.result()))
        return [by_name[s.name] for s in chosen]

    warm(adapter.trace_paths())
    if jobs <= 1 or len(chosen) <= 1:
        return [one(scenario) for scenario in chosen]
    from chaos.core.process import ChildFailed, Exit, first_to_answer, fork

    running: dict[Any, int] = {}  # child -> index of the family it prepares
    done: dict[int, Family] = {}

    def collect() -> None:
        """Wait for whichever family is prepared first (one slow family holds no other slot)."""
        child = first_to_answer(list(running))
        index = running.pop(child)
        ended = child.wait()
        if ended.exit is not Exit.FINISHED:
            for other in running:
                other.kill()
            raise RuntimeError(str(ChildFailed(f"preparing family {chosen[index].name!r}", ended)))
        done[index] = ended.value

    for index, scenario in enumerate(chosen):
        while len(running) >= jobs:
            collect()
        running[fork(lambda scenario=scenario: one(scenario))] = index
    while running:
        collect()
    return [done[i] for i in range(len(chosen))]


def _chunks(work: list[Work], jobs: int) -> list[list[Work]]:
    """``work`` in chunks of at most about :data:`CHUNK_POINTS`, a multiple of ``jobs`` of them,
    each taking every n-th item: each worker process gets as many points of every family (a
    family whose points wait on a held lock, or run a whole retry storm, is shared too)."""
    count = max(1, jobs) * max(1, -(-len(work) // (CHUNK_POINTS * max(1, jobs))))
    return [chunk for chunk in (work[i::count] for i in range(count)) if chunk]


def _firsts(family: str, kind: str, singles: list[int], classes: list[int],
            members: dict[tuple[str, str, int], list[int]]) -> list[int]:
    """The points to run: the first of each class among ``singles`` (every one without classes);
    the others are noted in ``members`` to share their first point's outcome."""
    if not classes:
        return singles
    for i in singles:
        if classes[i] != i:
            members.setdefault((kind, family, classes[i]), []).append(i)
    return sorted({classes[i] for i in singles})


def _execute(share: Share, chunks: list[list[Work]], jobs: int) -> list[tuple[Work, Outcome]]:
    """Run the chunks, in lean worker processes when that pays (see :mod:`chaos.matrix.zygote`).

    Adapters that cannot be pickled (a closure, an open connection) run here instead, forking
    from this process.
    """
    items = sum(len(chunk) for chunk in chunks)
    lean = jobs > 1 or (items >= LEAN_ITEMS_MIN and _rss_mb() > LEAN_RSS_MB_MAX)
    if lean:
        try:
            payload = pickle.dumps(share.for_items([]))
        except Exception:  # not picklable: fork from here
            lean = False
    if not lean:
        adopt(share.for_items(chunks))
        return [item for chunk in chunks for item in run_chunk(chunk)]
    del payload
    workers = max(1, min(jobs, len(chunks)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    procs = []
    for n in range(workers):
        source = os.path.join(share.workdir, f"zygote-{n}.in")
        target = os.path.join(share.workdir, f"zygote-{n}.out")
        mine = chunks[n::workers]
        with open(source, "wb") as f:
            pickle.dump((share.for_items(mine), mine), f)
        procs.append((subprocess.Popen([sys.executable, "-m", "chaos.matrix.zygote", source, target], env=env), target))
    done: list[tuple[Work, Outcome]] = []
    for proc, target in procs:
        if proc.wait() != 0:
            raise RuntimeError(f"a matrix worker process exited with status {proc.returncode}; its error is printed above")
        with open(target, "rb") as f:
            done.extend(pickle.load(f))
    return done


def adopt(share: Share) -> None:
    """Make ``share`` the one this process's :func:`run_chunk` runs items with."""
    global _share
    _share = share


def _rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def interleave_pairs(family: Family, only: str | None, budget: int, rng: random.Random,
           firsts: Iterable[int] | None = None) -> tuple[list[tuple[int, int]], int]:
    """Which (p, q) pairs of a family to interleave, and how many exist.

    Two workers share nothing but the database, and a transaction is atomic to the other, so
    freezing one anywhere between two of its transactions is, to the other, the same as freezing
    it just before the next statement: the candidates are the points just before a statement
    reaches the database while the worker holds no open transaction. Every candidate p gets an
    equal share of the ``budget`` of q's (a seeded sample), so no p is left out. ``firsts``
    restricts p (a fault plan's ``steps``); q is any candidate, as the second worker starts afresh.
    """
    if family.scenario.phase != "worker":
        # B is a worker: its freeze points come from the family's recording only when A runs the
        # same iteration (a frozen sender or person is covered by the pause matrix instead).
        return [], 0
    between = family.between or [True] * len(family.points)
    seconds = [
        i for i, p in enumerate(family.points) if between[i] and ".execute(" in source_line(p.file, p.line)
    ]
    allowed = set(firsts) if firsts is not None else None
    candidates = seconds if allowed is None else [i for i in seconds if i in allowed]
    if only:
        first, _, second = only.partition("+")
        ids = {p.id: i for i, p in enumerate(family.points)}
        if first in ids and second in ids:
            return [(ids[first], ids[second])], len(candidates) * len(seconds)
        return [], len(candidates) * len(seconds)
    possible = len(candidates) * len(seconds)
    if possible <= budget:
        return [(i, j) for i in candidates for j in seconds], possible
    per_point = max(1, budget // max(1, len(candidates)))
    chosen = [(i, j) for i in candidates for j in rng.sample(seconds, min(per_point, len(seconds)))]
    return chosen[:budget] if len(chosen) > budget else chosen, possible


def scratch_dir() -> str:
    """A fresh directory for scenario databases: on tmpfs (/dev/shm) when there is one.

    A process crash leaves a file in the same state on any file system (the page cache survives
    the process), so tmpfs changes nothing that fork mode simulates, and spares every scenario
    the fsyncs of a checkpoint. ``CRASHGATE_WORKDIR`` overrides the location.
    """
    base = os.environ.get("CRASHGATE_WORKDIR") or ("/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
    return tempfile.mkdtemp(prefix="crashgate-", dir=base)


def source_line(path: str, line: int) -> str:
    import linecache

    return linecache.getline(path, line).strip()


def _short(path: str) -> str:
    cwd = os.getcwd()
    return os.path.relpath(path, cwd) if path.startswith(cwd) else path
