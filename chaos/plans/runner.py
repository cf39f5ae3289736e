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
whole invariant catalog and its ``expect`` table.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple, TYPE_CHECKING

from chaos.adapter import resolve_jobs
from chaos.adapters.postgres import is_postgres
from chaos.core import effects, libfiu
from chaos.core.invariants import HARNESS_CHECKS, INVARIANTS, Violation, busiest_window
from chaos.core.findings import plain, plural
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
from chaos.matrix.runner import Share
from chaos.plans.plan import GROUP_CLAIM, GROUP_RELEASE, GROUP_SEND, Action, Expect, FaultSpec, Plan, PlanError, ScriptedScenario
from chaos.core.points import CommitCounter, Point, Recorder
from chaos.core.sampling import sample_every_kind
from chaos.core.sandbox import Sandbox
from chaos.core.freeze import run_interleaving, run_pause
from chaos.core.prepare import prepare
from chaos.core.kill import run_point
from chaos.core.scenario import PAUSE_KINDS, Family, Outcome, Scenario
from chaos.core.world import Call, Fault

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
        faults=tuple(_fault(f) for f in section.faults),
        second_worker=section.second_worker,
    )
    try:
        refuse_on_a_server(machine_kinds(faults), None, adapter)  # a full disk or libfiu act on SQLite files only
        refuse_without_schema(machine_kinds(faults), adapter, f"{type(adapter).__module__}:{type(adapter).__qualname__}")
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
        from chaos.matrix.runner import interleave_pairs  # the matrix's rule for which pairs can differ

        found, possible = interleave_pairs(prepared.family, None, pairs, random.Random(f"{seed}:{prepared.plan.name}:pairs"), firsts=indexes)
        items += [PlanItem(i, "interleave", j) for i, j in found]
    machine = machine_kinds(faults)
    if machine:
        from chaos.matrix.runner import source_line  # the matrix's reading of a point's line

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

        _ADAPTERS[target] = load_adapter(target)
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


# -- scripted scenarios -------------------------------------------------------------------------
@dataclass
class ScenarioResult:
    violations: list[Violation] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    wasted_calls: int = 0
    seconds: float = 0.0
    final_states: dict[str, str] = field(default_factory=dict)

    @property
    def held(self) -> bool:
        return not self.violations and not self.failures


def run_scenario(scenario: ScriptedScenario, adapter: Adapter, directory: str, *, seed: int) -> ScenarioResult:
    """Play the script, drain, then check the invariant catalog and the scenario's expect."""
    started = time.perf_counter()
    box = Sandbox(adapter, directory, seed=seed)
    result = ScenarioResult()
    try:
        for job_id in scenario.jobs:
            box.submit(resolve_jobs(job_id, adapter))  # a job named by position is the adapter's
        for action in scenario.script:
            problem = _play(box, action, adapter)
            if problem:
                result.failures.append(problem)
                break
        else:
            box.drain()
            result.violations = box.check()
            if scenario.expect is not None:
                result.failures += _box_failures(box, scenario.expect)
        result.wasted_calls = box.wasted_calls()
        result.final_states = box.states()
    finally:
        box.close()
    result.seconds = time.perf_counter() - started
    return result


def _play(box: Sandbox, action: Action, adapter: Adapter) -> str | None:
    """Do one action; return what went wrong, if anything."""
    o = action.options
    worker = o.get("worker", "w1")
    expected = o.get("expect_error")
    errors: tuple[type[BaseException], ...] = ()
    if expected == "conflict":
        errors = tuple(getattr(adapter, "conflict_errors", ())) or (Exception,)
    elif expected == "illegal":
        errors = tuple(getattr(adapter, "human_errors", ())) or (Exception,)
    try:
        if action.verb == "submit":
            box.submit(action.value, o.get("payload"), worker=worker)
        elif action.verb == "run":
            box.run(action.value, worker=worker)
        elif action.verb == "send":
            box.send(worker=worker)
        elif action.verb == "advance_s":
            box.advance(action.value)
        elif action.verb == "poll_s":
            box.poll(action.value, o["tick_s"], worker=worker)
        elif action.verb == "drain":
            box.drain(worker=worker)
        elif action.verb == "fault":
            assert action.fault is not None
            box.arm(_fault(action.fault))
        elif action.verb == "heal":
            box.heal()
        elif action.verb == "requeue":
            box.requeue(action.value, worker=worker)
        elif action.verb == "resolve":
            box.resolve(action.value, o["action"], worker=worker)
        elif action.verb == "cancel":
            box.cancel(action.value, worker=worker)
        elif action.verb == "expect":
            assert action.expect is not None
            failures = _box_failures(box, action.expect)
            return "; ".join(failures) if failures else None
    except errors:
        return None
    except Exception as exc:
        return f"{action.where} ({_describe(action)}) raised {type(exc).__name__}: {exc}"
    if expected is not None:
        return f"{action.where} ({_describe(action)}) was accepted, but the plan expects it to be refused as {expected}"
    return None


def _describe(action: Action) -> str:
    parts = [f"{action.verb} = {json.dumps(action.value) if action.verb != 'expect' else '{...}'}"]
    parts += [f"{k} = {json.dumps(v)}" for k, v in action.options.items()]
    return ", ".join(parts)


def _box_failures(box: Sandbox, expect: Expect) -> list[str]:
    calls = box.calls()
    failures = expect_failures(
        expect,
        states=box.states(),
        calls_by_step=Counter(c.step for c in calls),
        applied=len(box.applied()),
        wasted=box.wasted_calls(),
        last_errors=box.last_errors(),
    )
    if expect.job_rows is not None:
        rows = len(box.states())
        if rows != expect.job_rows:
            failures.append(f"{expect.where}: expected {plural(expect.job_rows, 'job row')}, found {rows}")
    if expect.burst_max is not None:
        b = expect.burst_max
        since = box.started_at + b["from_s"]
        times = sorted(c.at for c in calls if c.step == b["step"] and c.at >= since)
        worst, at = busiest_window(times, b["window_s"])
        if worst > b["max"]:
            failures.append(
                f"{expect.where}: {worst} calls of step {b['step']!r} within {b['window_s']:g}s "
                f"(from t={at - box.started_at:.2f}s); at most {b['max']} allowed"
            )
    if expect.call_gap_min is not None:
        g = expect.call_gap_min
        gap, job = _smallest_gap(calls, g["step"])
        if gap is not None and gap < g["seconds"]:
            failures.append(
                f"{expect.where}: two calls of step {g['step']!r} for job {job!r} were {gap:.2f}s apart; at least {g['seconds']:g}s expected"
            )
    return failures


def expect_failures(expect: Expect, *, states: dict[str, str], calls_by_step: Counter, applied: int, wasted: int,
                    last_errors: dict[str, str | None] | None = None) -> list[str]:
    """What a section's ``expect`` finds wrong, one line each (a job in the wrong state with its
    ``last_error``, where the engine gave one)."""
    out: list[str] = []
    errors = last_errors or {}

    def why(job_ids: Iterable[str]) -> str:
        said = [f"{job_id!r}: {errors[job_id]}" for job_id in job_ids if errors.get(job_id)]
        return f" (last_error of {'; of '.join(said)})" if said else ""

    if expect.state is not None:
        wrong = {j: s for j, s in sorted(states.items()) if s != expect.state}
        if wrong or not states:
            out.append(f"{expect.where}: expected every job in {expect.state!r}, found {wrong or 'no jobs'}{why(wrong)}")
    for job_id, state in expect.states.items():
        if states.get(job_id) != state:
            out.append(f"{expect.where}: expected job {job_id!r} in {state!r}, found {states.get(job_id)!r}{why([job_id])}")
    for step, count in expect.calls.items():
        if calls_by_step.get(step, 0) != count:
            out.append(f"{expect.where}: expected {plural(count, 'paid call')} during step {step!r}, the ledger has {calls_by_step.get(step, 0)}")
    if expect.applied is not None and applied != expect.applied:
        out.append(f"{expect.where}: expected {plural(expect.applied, 'effect')} applied at the receiver, found {applied}")
    if expect.wasted_max is not None and wasted > expect.wasted_max:
        out.append(f"{expect.where}: {plural(wasted, 'wasted paid call')}; at most {expect.wasted_max} allowed")
    return out


def _smallest_gap(calls: list[Call], step: str) -> tuple[float | None, str | None]:
    last: dict[str, float] = {}
    best: tuple[float | None, str | None] = (None, None)
    for call in calls:
        if call.step != step:
            continue
        if call.job_id in last:
            gap = call.at - last[call.job_id]
            if best[0] is None or gap < best[0]:
                best = (gap, call.job_id)
        last[call.job_id] = call.at
    return best


def _fault(spec: FaultSpec) -> Fault:
    return Fault(spec.kind, task=spec.task, retry_after_s=spec.retry_after_s, duration_s=spec.duration_s, sticky=spec.sticky,
                 per_job=spec.per_job)


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
