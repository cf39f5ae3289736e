"""The crash matrix: every point of every scenario family, killed, recovered and checked.

:func:`run_matrix` is the run: its input checked and its target resolved at the door
(:mod:`chaos.matrix.door`), every family prepared (its template, its recording, its baseline), the
items chosen (:mod:`chaos.matrix.selection`) and run (:mod:`chaos.matrix.work`), and the results
gathered in a report (:mod:`chaos.matrix.report`). The names those modules define that callers
import from here are re-exported, so ``from chaos.matrix.runner import ...`` keeps working.

>>> report = run_matrix(families=["sender"], mode="inprocess", faults=["crash"])
>>> report.points > 0, report.violations
(True, 0)
"""

from __future__ import annotations

import pickle
import random
import shutil
import time
import warnings
from typing import Any, Iterable

from chaos.adapter import REFERENCE_TARGET
from chaos.core import effects, libfiu, pristine
from chaos.core.hangs import check_timeout
from chaos.core.points import warm
from chaos.core.prepare import prepare
from chaos.core.sampling import sample_every_kind
from chaos.core.scenario import AT_START, PAUSE_KINDS, Family, Scenario
from chaos.core.store_faults import small_pages
from chaos.core.target import Target
from chaos.core.template import discard
from chaos.core.world import STORE_FAULT_KINDS
from chaos.hostfaults.faults import KIND_OF, expand, machine_points, machine_scenarios, start_preloaded
from chaos.matrix.door import DEFAULT_SEED, FAULTS, PAIRS_DEFAULT, MatrixUsageError, set_up
from chaos.matrix.report import DEFAULT_FAULTS, MatrixReport, PointResult, replay_command, source_line
from chaos.matrix.selection import across_families, firsts, interleave_pairs, shared_across, shared_outcome
from chaos.matrix.work import CHUNK_POINTS, PREPARE, Share, Work, adopt, chunked, execute, run_chunk, scratch_dir

__all__ = [
    "CHUNK_POINTS",
    "DEFAULT_FAULTS",
    "DEFAULT_SEED",
    "FAULTS",
    "MatrixReport",
    "MatrixUsageError",
    "PAIRS_DEFAULT",
    "PREPARE",
    "PointResult",
    "Share",
    "adopt",
    "interleave_pairs",
    "replay_command",
    "run_chunk",
    "run_matrix",
    "scratch_dir",
    "source_line",
]


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
            set_up(target, mode=mode, families=families, point=point, scenarios=scenarios, faults=tuple(faults), db=db, replay_db=replay_db)
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
        setup = set_up(target, mode=mode, families=families, point=point, scenarios=scenarios, faults=faults, db=db, replay_db=replay_db)
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
                work += [("crash", scenario.name, i, -1) for i in firsts(scenario.name, "crash", singles, classes, members)]
            elif fault == "pause" and not machine_only:
                classes = family.classes if one_per_class else []
                work += [(kind, scenario.name, i, -1) for i in firsts(scenario.name, "pause", singles, classes, members)
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
    across = across_families(work, prepared) if one_per_class and mode == "fork" else {}
    under_fiu = start_preloaded(share, preloaded)  # runs meanwhile
    done = execute(share, chunked([w for w in work if w not in across], jobs), jobs)
    shared, ran_for = shared_across(share, across, dict(done), adapter)
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
                same = PointResult(name, o, source_line(o.file, o.line), shared_outcome(outcome, o.id), "", None, same_as=result.id)
                same.replay = replay_command(target_name, mode, seed, same.id, deep, fault, replay_extra)
                report.results.append(same)
    report.seconds = time.perf_counter() - started
    return report


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
