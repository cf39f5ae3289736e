"""Running fault plans: prepare a plan's crash points, kill at one, play a scripted scenario.

A ``[points]`` section becomes a scenario family (:func:`chaos.core.prepare.prepare`): its doomed
iteration is recorded once, then re-run under a second recorder that notes, at every point, the
job's committed state. That state names the point's group: the step the job was in when the
worker died (``extract``), ``claim`` before the worker's claim committed, ``release`` after its
last commit, ``send`` for the outbox sender. A test id is ``PLAN::GROUP::POINT`` for a crash,
``PLAN::GROUP::POINT@pause-live`` and ``@pause-expired`` for a worker frozen there while another
runs (its lease still valid, or expired), ``PLAN::GROUP::P+Q@interleave`` for two workers frozen
in turn at P and Q: ``@`` and ``+`` need no quoting in any shell, as ``[`` would in zsh.

A fault of the machine is scheduled as the crash matrix schedules it
(:mod:`chaos.hostfaults.faults`): a kind names its sub-kinds (``disk`` is ``disk-full``), each
injected at the points where it can show (:func:`~chaos.hostfaults.faults.machine_points`), one item
each, ``PLAN::GROUP::POINT@disk-full``. A plan that names one is prepared as the matrix prepares
its machine family, with small pages (:func:`~chaos.hostfaults.faults.small_pages`), so that a full
disk shows within a write or two; the ``io`` faults run in a process started by libfiu's
``fiu-run`` (:func:`~chaos.hostfaults.faults.run_preloaded`).

A ``[[scenario]]`` runs its script on a :class:`~chaos.core.sandbox.Sandbox`, drains, and checks the
whole invariant catalog and its ``expect`` table. (:mod:`chaos.plans.scenarios`, whose public names this
module's ``__all__`` names too).
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, NamedTuple, TYPE_CHECKING

from chaos.adapters.postgres import is_postgres
from chaos.core import effects, libfiu
from chaos.core.invariants import HARNESS_CHECKS, INVARIANTS
from chaos.core.findings import plain
from chaos.hostfaults.faults import (
    CHECKS,
    KIND_OF,
    expand,
    machine_points,
    refuse_on_a_server,
    refuse_without_schema,
    run_machine_fault,
    run_preloaded,
)
from chaos.core.store_faults import small_pages
from chaos.core.target import resolve
from chaos.matrix.work import Share
from chaos.plans.plan import GROUP_CLAIM, GROUP_RELEASE, GROUP_SEND, Plan, PlanError
from chaos.core.points import CommitCounter, Point, Recorder
from chaos.core.sampling import sample_every_kind
from chaos.core.freeze import run_interleaving, run_pause
from chaos.core.prepare import prepare
from chaos.core.kill import run_point
from chaos.core.scenario import PAUSE_KINDS, Family, Outcome, Scenario
from chaos.plans.scenarios import ScenarioResult, expect_failures, run_scenario, to_fault

if TYPE_CHECKING:
    from chaos.adapter import Adapter

__all__ = [
    "PreparedPoints",
    "PlanItem",
    "prepare_points",
    "prepare_target_points",
    "select_items",
    "Selection",
    "run_plan_point",
    "run_target_point",
    "run_scenario",
    "ScenarioResult",
    "why",
    "item_name",
    "ITEM_FAULTS",
    "FAULT_MARK",
    "machine_kinds",
    "expect_failures",
]

# What one item does at its point: the plan's fault kinds, a pause run twice (lease valid, expired),
# a fault of the machine once per sub-kind (disk-full, io-eio, ...).
ITEM_FAULTS = ("crash", *PAUSE_KINDS, "interleave", *KIND_OF)
FAULT_MARK = "@"  # POINT@pause-live: shell-safe (shlex leaves it unquoted), unlike [ ] or < >


@dataclass(frozen=True)
class PlanItem:
    """One test item of a plan's points: a point, what happens there, and (interleave) B's point."""

    index: int
    fault: str = "crash"
    second: int = -1


def item_name(point: Point, fault: str = "crash", second: Point | None = None) -> str:
    """A point's test-item name: its id without the angle brackets of ``<listcomp>`` and the like,
    so that a test id pasted into a shell is not read as a redirection; then ``+`` the second
    worker's point of an interleaving, and ``@`` the fault kind unless it is a crash.

    >>> item_name(Point("/src/engine/_worker.py", 368, 6, "<dictcomp>"))
    '_worker.dictcomp:L368#6'
    >>> item_name(Point("/src/engine/_worker.py", 257, 1, "run_once"), "pause-live")
    '_worker.run_once:L257#1@pause-live'
    """
    name = point.id.replace("<", "").replace(">", "")
    if second is not None:
        name += "+" + second.id.replace("<", "").replace(">", "")
    return name if fault == "crash" else f"{name}{FAULT_MARK}{fault}"


@dataclass
class PreparedPoints:
    """A plan's family, ready to be killed at any point, and each point's group."""

    plan: Plan
    family: Family
    groups: list[str]
    workdir: str

    def group_names(self) -> list[str]:
        """The groups in the order their first point is reached."""
        return list(dict.fromkeys(self.groups))


def machine_kinds(faults: tuple[str, ...]) -> tuple[str, ...]:
    """The sub-kinds of the faults of the machine among ``faults``, each once, in order.

    >>> machine_kinds(("crash", "lock", "disk-full"))
    ('lock-held', 'disk-full')
    """
    return tuple(dict.fromkeys(sub for f in faults for sub in expand(f)))


def prepare_points(plan: Plan, adapter: Adapter, workdir: str, *, seed: int, faults: tuple[str, ...] = (),
                   timeout_s: float | None = None) -> PreparedPoints:
    """Record the doomed iteration of ``plan.points`` and group its points by step (``timeout_s``:
    the bound on the baseline and on each point's scenario, see :mod:`chaos.core.hangs`).

    ``faults`` are the kinds the plan's items will run; with a fault of the machine among them,
    the databases get small pages, as the matrix's machine family does (a full disk must show).
    """
    section = plan.points
    assert section is not None, "prepare_points needs a plan with a [points] section"
    scenario = Scenario(
        name=plan.name,
        lesson=plan.lesson,
        jobs=section.jobs,
        setup=section.setup,
        phase="worker" if section.phase == "worker" else "sender",
        faults=tuple(to_fault(f) for f in section.faults),
        second_worker=section.second_worker,
    )
    adapter = resolve(adapter)
    try:
        refuse_on_a_server(machine_kinds(faults), None, adapter)  # a full disk or libfiu act on SQLite files only
        refuse_without_schema(machine_kinds(faults), adapter, f"{type(adapter.adapter).__module__}:{type(adapter.adapter).__qualname__}")
    except ValueError as exc:
        raise PlanError(f"{plan.path}: {exc} (in a fault plan: leave them out of its key 'points.fault', or of --chaos-faults)") from None
    os.makedirs(workdir, exist_ok=True)
    family = prepare(small_pages(adapter) if machine_kinds(faults) else adapter, scenario, workdir, seed=seed, deep=section.deep,
                     timeout_s=timeout_s)
    if section.phase == "sender":
        groups = [GROUP_SEND] * len(family.points)
    else:
        groups = _groups(adapter, family, workdir, seed=seed, deep=section.deep)
    return PreparedPoints(plan, family, groups, workdir)


class CommittedStates:
    """The jobs' committed states, as the adapter's ``inspect`` shows them, read again only when
    another connection has committed since the last read (a :class:`~chaos.core.points.CommitCounter`;
    a database on a server is read every time): read before every line of an iteration, it costs
    a look at the file's WAL index where nothing was written, and lets no other thread run."""

    class Unreadable(Exception):
        """The database could not be read."""

    def __init__(self, adapter: Adapter, db: str) -> None:
        self.adapter, self.db = adapter, db
        self.version: Any = None
        self.states: tuple[str, ...] = ()
        self.counter: CommitCounter | None = None
        if not is_postgres(db):
            try:
                self.counter = CommitCounter(db)
            except sqlite3.Error:
                pass

    def read(self) -> tuple[str, ...]:
        try:
            version = self.counter() if self.counter is not None else None
            if version is None or version != self.version:
                jobs = self.adapter.inspect(self.db).jobs
                self.states, self.version = tuple(jobs[j].state for j in sorted(jobs)), version
        except Exception as exc:  # whatever the adapter's inspect raises: no grouping, not a crash
            raise CommittedStates.Unreadable(f"{type(exc).__name__}: {exc}") from exc
        return self.states

    def close(self) -> None:
        if self.counter is not None:
            self.counter.close()


def _groups(adapter: Adapter, family: Family, workdir: str, *, seed: int, deep: bool) -> list[str]:
    """Each point's step: the iteration runs once more, in a child, reading the jobs' committed
    states before every line."""
    from chaos.core.process import Exit, fork
    from chaos.core.kill import doomed_iteration
    from chaos.core.template import fresh_run

    if not family.points:
        return []
    run = fresh_run(adapter, family, os.path.join(workdir, "groups-" + family.scenario.name), seed)

    def body() -> tuple[list[str], list[tuple[str, ...]]] | None:
        iteration = doomed_iteration(run)
        committed = CommittedStates(adapter, run.db)
        # Read before each line runs: a kill at that point leaves exactly this committed state.
        recorder = Recorder(adapter.trace_paths(), run.only(deep), observe={"states": committed.read})
        try:
            with recorder:
                iteration()
        except CommittedStates.Unreadable:  # the points cannot be grouped by step
            return None
        finally:
            committed.close()
        return [p.id for p in recorder.points], recorder.observed["states"]

    try:
        ended = fork(body).wait()
    finally:
        run.close()
    if ended.exit is not Exit.FINISHED or ended.value is None:
        return [GROUP_CLAIM] * len(family.points)
    ids, states_read = ended.value
    # The same points, each read once; on an engine with a step thread, reading the database lets
    # the other thread record its next point first, so the order may differ where they hand over.
    if sorted(ids) != sorted(p.id for p in family.points):
        raise PlanError(
            f"{family.scenario.name}: the doomed iteration reached different lines when run twice; crash points "
            "must be deterministic (pass the clock and the RNG in; do not read the wall clock or os.urandom)"
        )
    read_at = dict(zip(ids, states_read))
    states_at = [read_at[p.id] for p in family.points]
    working = {w: step for step, (w, _) in adapter.step_states().items()}
    groups: list[str] = []
    started = False
    for states in states_at:
        step = next((working[s] for s in states if s in working), None)
        started = started or step is not None
        groups.append(step if step is not None else (GROUP_RELEASE if started else GROUP_CLAIM))
    return groups


class Selection(NamedTuple):
    """The items of a plan to collect, how many interleaving pairs exist (0 without
    ``interleave``), and how many items there were to choose from (more than ``items`` under a
    sample: the report says "25 of 359")."""

    items: list[PlanItem]
    pairs_possible: int
    of: int


def select_items(prepared: PreparedPoints, selection: str, *, seed: int, faults: tuple[str, ...] = ("crash",),
                 pairs: int = 200) -> Selection:
    """The items to collect, how many interleaving pairs exist (0 without ``interleave``) and how
    many items the selection chose from (see :class:`Selection`).

    ``faults`` are the plan's kinds (crash, pause, interleave, and the faults of the machine: a
    kind or a sub-kind, each sub-kind at the points where it can show); ``selection`` is ``all``, a
    seeded sample of N items, or one item name (``POINT``, ``P+Q``, either with ``@KIND``, and an
    optional ``GROUP::`` before it); ``pairs`` bounds the interleavings, a seeded sample of them.
    Everything is restricted to the plan's ``steps``.
    """
    wanted = prepared.plan.points.steps if prepared.plan.points else None
    indexes = [i for i, g in enumerate(prepared.groups) if wanted is None or g in wanted]
    items: list[PlanItem] = []
    for i in indexes:
        items += [PlanItem(i, "crash")] if "crash" in faults else []
        items += [PlanItem(i, kind) for kind in PAUSE_KINDS] if "pause" in faults else []
    possible = 0
    if "interleave" in faults:
        from chaos.matrix.selection import interleave_pairs  # the matrix's rule for which pairs can differ

        found, possible = interleave_pairs(prepared.family, None, pairs, random.Random(f"{seed}:{prepared.plan.name}:pairs"), firsts=indexes)
        items += [PlanItem(i, "interleave", j) for i, j in found]
    machine = machine_kinds(faults)
    if machine:
        from chaos.matrix.report import source_line  # the matrix's reading of a point's line

        allowed = set(indexes)
        items += [PlanItem(i, sub) for i in machine_points(prepared.family, source_line) if i in allowed for sub in machine]
    order = {kind: n for n, kind in enumerate(ITEM_FAULTS)}
    items.sort(key=lambda it: (it.index, order[it.fault], it.second))
    if selection == "all":
        return Selection(items, possible, len(items))
    if selection.isdigit():
        n = int(selection)
        if n >= len(items):
            return Selection(items, possible, len(items))
        picked = sample_every_kind(items, n, random.Random(f"{seed}:{prepared.plan.name}"), kind=lambda it: it.fault)
        return Selection([items[k] for k in picked], possible, len(items))
    group, _, name = selection.rpartition("::")
    name, _, kind = name.partition(FAULT_MARK)
    wanted_names = {name, name.replace("<", "").replace(">", "")}
    return Selection([it for it in items if _base_name(prepared, it) in wanted_names and (not kind or it.fault == kind)
                      and (not group or prepared.groups[it.index] == group)], possible, len(items))


def _base_name(prepared: PreparedPoints, item: PlanItem) -> str:
    points = prepared.family.points
    return item_name(points[item.index], "crash", points[item.second] if item.second >= 0 else None)


def run_plan_point(prepared: PreparedPoints, index: int, adapter: Adapter, scratch: str, *, seed: int, mode: str,
                   fault: str = "crash", second: int = -1) -> tuple[Outcome, list[str]]:
    """Kill at point ``index`` (or freeze there: ``fault``, see :data:`ITEM_FAULTS`); return the
    outcome and the failed expectations of the plan. A pause forks whatever ``mode`` says: only a
    process can be frozen; so does a fault of the machine (``fault`` a sub-kind, e.g. ``disk-full``),
    and an ``io`` one forks from a process started by ``fiu-run`` (libfiu must be installed)."""
    section = prepared.plan.points
    assert section is not None, "run_plan_point needs a plan with a [points] section"
    assert fault in ITEM_FAULTS, f"fault {fault!r} is not one of {ITEM_FAULTS}"
    family, point = prepared.family, prepared.family.points[index]
    adapter = resolve(adapter)  # a target comes back as it is
    if fault == "crash":
        outcome = run_point(adapter, family, point, scratch, seed=seed, mode=mode, deep=section.deep)
    elif fault in PAUSE_KINDS:
        outcome = run_pause(adapter, family, point, scratch, seed=seed, expired=fault == PAUSE_KINDS[1], deep=section.deep)
    elif KIND_OF.get(fault) == "io":
        outcome = _run_io(adapter, family, index, scratch, seed=seed, mode=mode, fault=fault, deep=section.deep)
    elif fault in KIND_OF:
        outcome = run_machine_fault(adapter, family, point, scratch, seed=seed, fault=fault, deep=section.deep)
    else:
        assert second >= 0, "an interleaving needs the second worker's point"
        outcome = run_interleaving(adapter, family, point, family.points[second], scratch, seed=seed, deep=section.deep)
    failures: list[str] = []
    if section.expect is not None:
        calls = Counter()
        for key, count in outcome.calls.items():
            calls[key.rpartition(":")[2]] += count
        failures = expect_failures(
            section.expect,
            states=outcome.final_states,
            calls_by_step=calls,
            applied=outcome.applied,
            wasted=outcome.wasted_calls,
            last_errors=outcome.last_errors,
        )
    return outcome, failures


# The plans this process prepared for targets named by their string (see prepare_target_points).
_PREPARED: dict[tuple[Any, ...], PreparedPoints] = {}
_ADAPTERS: dict[str, Any] = {}


def _target_adapter(target: str) -> Any:
    if target not in _ADAPTERS:
        from chaos.adapter import load_adapter

        _ADAPTERS[target] = resolve(load_adapter(target))
    return _ADAPTERS[target]


def prepare_target_points(plan: Plan, target: str, workdir: str, *, seed: int, faults: tuple[str, ...] = (),
                          allowed_effects: Iterable[str] = (), timeout_s: float | None = None) -> PreparedPoints:
    """:func:`prepare_points` for the adapter named ``target``, kept for :func:`run_target_point`.

    The pytest plugin calls both through :func:`chaos.core.pristine.call`: a plan's points are
    recorded and run in a process that never ran the code under test, whatever the tests before
    them ran in the test's own process. ``allowed_effects``: what the run declares is no effect.
    """
    # The folder is part of the key: a new test session prepares into a folder of its own, and
    # what an earlier session prepared (its folder removed since) is never handed to it.
    key = (plan.file or os.path.abspath(plan.path), target, seed, tuple(faults), os.path.abspath(workdir), timeout_s)
    if key not in _PREPARED:
        if os.path.isdir(workdir) and os.listdir(workdir):  # prepared by an earlier server, which ended: start afresh beside it
            import tempfile

            workdir = tempfile.mkdtemp(prefix="again-", dir=workdir)
        with effects.allowing(allowed_effects):  # the baseline is recorded here
            _PREPARED[key] = prepare_points(plan, _target_adapter(target), workdir, seed=seed, faults=faults, timeout_s=timeout_s)
    return _PREPARED[key]


def run_target_point(plan: Plan, target: str, workdir: str, index: int, scratch: str, *, seed: int, mode: str,
                     faults: tuple[str, ...] = (), fault: str = "crash", second: int = -1,
                     allowed_effects: Iterable[str] = ()) -> tuple[Outcome, list[str]]:
    """:func:`run_plan_point` on the plan :func:`prepare_target_points` prepared (again, if this
    process has not: a new server records the same points, the iteration being deterministic);
    ``allowed_effects``: what the run declares is no effect (see :mod:`chaos.core.effects`)."""
    prepared = prepare_target_points(plan, target, workdir, seed=seed, faults=faults, allowed_effects=allowed_effects)
    with effects.allowing(allowed_effects):
        return run_plan_point(prepared, index, _target_adapter(target), scratch, seed=seed, mode=mode, fault=fault, second=second)


def _run_io(adapter: Adapter, family: Family, index: int, scratch: str, *, seed: int, mode: str, fault: str, deep: bool) -> Outcome:
    """One io fault, run as the matrix runs it: in a process started by ``fiu-run -x``, whose
    forked worker inherits libfiu's POSIX wrappers (the fault is injected by the real mechanism)."""
    reason = libfiu.missing()
    if reason:
        raise ValueError(reason)
    directory = os.path.join(scratch, "io")
    if os.path.exists(directory):
        shutil.rmtree(directory)
    os.makedirs(directory)
    try:
        share = Share(adapter, {family.scenario.name: family}, directory, seed, mode, deep)
        done = run_preloaded(share, [(fault, family.scenario.name, index, -1)])
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if len(done) != 1:
        raise RuntimeError(f"the process started under fiu-run returned {len(done)} outcomes for one {fault} point")
    return done[0][1]


def why(invariant: str) -> str:
    """What an invariant (or a check after a fault of the machine) protects against: the second
    paragraph of its docstring, without the sentences about the check's own parameters (they
    name ``at_rest``, ``status``, ...), which teach nothing here.

    >>> why("progress-recorded").split(":")[0]
    'Protects against advancing the state in one transaction and writing the result in another'
    >>> why("worker-survives").split(" (")[0]
    'Protects against a loop that dies on the first database error'
    """
    fn = INVARIANTS.get(invariant) or CHECKS.get(invariant) or HARNESS_CHECKS.get(invariant)
    paragraphs = [" ".join(p.split()) for p in (fn.__doc__ or "").strip().split("\n\n")] if fn else []
    text = paragraphs[1] if len(paragraphs) > 1 else (paragraphs[0] if paragraphs else "")
    params = [f"``{name}``" for name in getattr(getattr(fn, "__code__", None), "co_varnames", ())[: _arg_count(fn)]]
    sentences = [part for part in text.split(". ")
                 if "at_rest" not in part and not part.startswith("Returns") and not any(p in part for p in params)]
    text = plain(". ".join(sentences).strip())  # the terminal shows it: no reST markup
    return text if not text or text.endswith((".", ".)")) else text + "."


def _arg_count(fn: Any) -> int:
    code = getattr(fn, "__code__", None)
    return code.co_argcount + code.co_kwonlyargcount if code is not None else 0


def point_of(prepared: PreparedPoints, index: int) -> Point:
    return prepared.family.points[index]
