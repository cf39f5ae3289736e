"""A scenario: a fresh database, jobs, a worker killed at one crash point, a recovery, the checks.

Every piece of code under test runs in a child forked for it (:mod:`chaos.core.process`), never in
the harness's own process: the family's setup, the recording of its doomed iteration (with the
baseline, the same iteration run to the end without any fault), each doomed iteration, and each
recovery. A recovery therefore starts in a process that never ran the doomed iteration, as a real
restart does, and a workflow that keeps state in process memory between steps is caught.

This module holds the words every phase of a scenario speaks: a family of points
(:class:`Scenario`, prepared once into a :class:`Family`), one scenario's run (:class:`Run`), what
it ended with (:class:`Outcome`), and the bound every scenario runs under (:func:`watched`). The
phases, in the order a point meets them, each in a module named after it:

- :mod:`chaos.core.prepare`: a family's setup, run once into its template, and its doomed
  iteration recorded, which gives its points and its baseline;
- :mod:`chaos.core.template`: the fresh copy of the template each point starts from;
- :mod:`chaos.core.kill` (the doomed worker killed at its point) or :mod:`chaos.core.freeze`
  (frozen there while another worker runs, then resumed);
- :mod:`chaos.core.settle`: what must hold at once, then a recovery in a fresh process that
  drains the system;
- :mod:`chaos.core.verdict`: the whole catalog checked at rest, and compared with the baseline.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, TYPE_CHECKING

from chaos.core.clock import SharedClock
from chaos.core.context import RunContext, close_quietly
from chaos.core.invariants import Evidence, Violation, hangs
from chaos.core.points import Point
from chaos.core.hangs import bound_s, stacks_json, stuck_at
from chaos.core.process import Exit, Hung, in_child, watchdog
from chaos.core.raises import watch_raises
from chaos.adapter import job_ref
from chaos.core import effects
from chaos.core.store_faults import IO_FAULTS
from chaos.core.world import STORE_FAULT_KINDS, Fault, World

if TYPE_CHECKING:
    from chaos.core.target import Target

__all__ = [
    # the words a family is written in
    "MODES", "PAUSE_KINDS", "AT_START", "T0", "EXIT_NOT_REACHED", "DOOMED", "EXIT_ERROR", "DEFAULT_PAYLOAD", "REFERENCE_STEPS",
    "poison_for", "reference_poison", "Scenario", "task_names", "for_adapter", "with_jobs_of", "resolve_states",
    # a family prepared, one scenario's run and what it ended with
    "Family", "Outcome", "Run", "RECOVERY_RNG_SCOPE", "arm_sticky",
    # the bound every scenario runs under
    "hung_outcome", "watched",
]

MODES = ("fork", "inprocess")
# The faults that freeze a worker at a point (chaos.core.freeze): its lease still valid, or past it.
PAUSE_KINDS = ("pause-live", "pause-expired")
# The task of a store fault brought on as the doomed iteration starts, before its claim.
AT_START = "claim"
T0 = 1_700_000_000.0
EXIT_NOT_REACHED = 3
DOOMED = "w-doomed"  # the doomed iteration's worker
EXIT_ERROR = 4
# What a recovery's workers seed their random generators with besides the seed and their identity
# (see Run.rng_scope): alike in every family, so that a recovery depends only on what it recovers.
RECOVERY_RNG_SCOPE = "recovery"
# What the harness submits for each job unless the adapter says otherwise (``payload(job_id)``).
DEFAULT_PAYLOAD = '{"source": <job id>}'


# The steps of the reference workflow, whose fetch step refuses an empty source.
REFERENCE_STEPS = ("fetch", "extract", "verify", "deliver")


def poison_for(adapter: Target) -> Callable[[str], Any] | None:
    """What makes a payload the adapter's first step refuses: its ``poison_payload(job_id)``, or
    for the reference workflow's steps an empty source; None if neither (a family that needs a
    poison payload is then skipped: any guess could be a payload the user's workflow accepts)."""
    if adapter.poison_payload is not None:
        return adapter.poison_payload
    if tuple(adapter.step_states()) == REFERENCE_STEPS:
        return reference_poison
    return None


def reference_poison(job_id: str) -> dict[str, str]:
    """A payload the reference workflow's fetch step refuses, for any job: an empty source."""
    return {"source": ""}


@dataclass(frozen=True)
class Scenario:
    """A family of crash points: what happens before the doomed iteration, and what it runs.

    ``setup`` is a list of actions run cleanly first: ``"run"`` (one worker iteration),
    ``"send"`` (one outbox pass), ``"advance:<s>"`` (move the clock), ``"claim:<worker>"`` (a
    worker claims the next job and dies holding its lease). ``phase`` is ``"worker"``,
    ``"sender"`` or a person's action, ``"human:<action>:<job>[:<arg>]"`` (e.g.
    ``"human:cancel:<job 1>"``; an action the engine refuses with its clear error is a clean end).
    ``faults`` are armed for the doomed iteration (a ``sticky`` one, a poison input, is armed for
    the setup and the recovery too: it fails the same way on every call); a store fault
    (``lock_held``, ``disk_full``, ``io_error``, ``io_read_error``) is brought on the doomed
    worker's store by its call, and the commit after it meets a busy, full or failing database
    (with the task ``claim``, as the iteration starts: its claim meets it); ``second_worker``
    lets a slow call run another worker while it lasts, whose clock runs
    ``second_worker_ahead_s`` ahead (the skew between two machines' clocks). ``worker`` holds
    settings of the doomed worker (``(name, value)`` pairs the session's ``configure_worker``
    takes: the reference engine's ``threaded``, ``step_timeout_s``), for a family that crashes a
    configuration users pick. ``paced`` makes every drain of the family move the clock only to
    the next lease, retry or outbox row that falls due, as a worker that polls often
    would see time pass, instead of past all of them at once: the ledger then shows when each
    retry happened, which a family about retry timing needs (``retry-spread``). ``poison`` submits
    the adapter's ``poison_payload(job_id)`` instead of its payload (:func:`poison_for`: the
    reference workflow's steps get an empty source; a family that needs it is skipped where the
    adapter has neither), and a ``"damage:payload:<job>"`` setup action overwrites
    that job's stored payload with what the engine never writes (through the adapter's ``schema``;
    ``"damage:memo:<job>[:<step>]"``, the output of that step's memo row, by default the first
    step's; ``"damage:state:<job>[:<state>]"``, the job's state, by default one no table knows;
    the audit notes it as the harness's own, see :attr:`chaos.adapter.Snapshot.damaged`), and
    ``"requeue:<job>"`` is a person's requeue of a failed job.

    ``jobs`` are the ids submitted first; a family names the adapter's jobs by position, ``<job 1>``
    (:func:`chaos.adapter.job_ref`), in ``jobs``, ``setup`` and ``phase`` alike, and
    :func:`for_adapter` resolves them through the adapter's ``job_ids(n)`` (``doc-1`` .. by
    default), so that its findings name the user's jobs.

    ``expect`` names the states every job must end in when the family runs without any fault
    (its baseline); by default the workflow's final states, or any settled state for a family
    with a poison fault, a failed review or a person's action. ``allowed`` names the other final
    states a job may reach after a fault, for a family whose point is a race (a killed cancel is
    a cancel that never happened). Both may use the names ``<final>`` (the workflow's final
    states), ``<parked>`` (settled but not final: failed, cancelled, waiting for a person) and
    ``<settled>``, so that a family fits any workflow.
    """

    name: str
    lesson: str
    jobs: tuple[str, ...] = (job_ref(1),)
    setup: tuple[str, ...] = ()
    phase: str = "worker"
    faults: tuple[Fault, ...] = ()
    second_worker: bool = False
    second_worker_ahead_s: float = 0.0
    worker: tuple[tuple[str, Any], ...] = ()
    expect: tuple[str, ...] | None = None
    allowed: tuple[str, ...] = ()
    paced: bool = False
    poison: bool = False

    def needs(self) -> tuple[str, ...]:
        """The session methods this family calls beyond the required ones (capabilities of
        :mod:`chaos.adapter`): ``claim_only`` for a ``claim:`` setup, ``requeue`` for a ``requeue:``
        one, ``connection`` for a ``disk_full`` fault, the action of a person's phase."""
        needed = ["claim_only"] if any(a.startswith("claim") for a in self.setup) else []
        if any(a.startswith("requeue:") for a in self.setup):
            needed.append("requeue")
        if "disk_full" in self.store_faults():
            needed.append("connection")  # the disk is filled for the worker's own connection
        if self.phase.startswith("human:"):
            needed.append(self.phase.split(":")[1])
        if self.worker:
            needed.append("configure_worker")
        return tuple(needed)

    def store_faults(self) -> tuple[str, ...]:
        """The kinds of the store faults its calls bring on (:data:`chaos.core.world.STORE_FAULT_KINDS`)."""
        return tuple(f.kind for f in self.faults if f.kind in STORE_FAULT_KINDS)

    def needs_libfiu(self) -> bool:
        """Whether its doomed iteration meets an I/O error: it is then prepared and run in a process
        started by ``fiu-run`` (:mod:`chaos.core.libfiu`)."""
        return any(kind in IO_FAULTS for kind in self.store_faults())

    def expected_states(self, adapter: Target) -> frozenset[str]:
        """The states every job must end in without any fault."""
        if self.expect is not None:
            return resolve_states(self.expect, adapter)
        open_ended = self.phase.startswith("human:") or any(f.sticky or f.kind == "verify_fail" for f in self.faults)
        return resolve_states(("<settled>",) if open_ended else ("<final>",), adapter)


def task_names(adapter: Target) -> dict[str, str]:
    """The adapter's ``tasks()``: the reference's task names (``fetch``, ``extract``, ``verify``,
    ``send``) mapped to its own, so that the reference families' faults reach its steps."""
    return dict(adapter.tasks)


def for_adapter(scenario: Scenario, adapter: Target) -> Scenario:
    """``scenario`` with its faults' tasks renamed by the adapter's :func:`task_names`, and the jobs
    it names by position (``<job 1>``) named by the adapter's ``job_ids`` (:func:`chaos.adapter.resolve_jobs`)."""
    scenario = with_jobs_of(scenario, adapter)
    names = adapter.tasks
    if not names or not scenario.faults:
        return scenario
    faults = tuple(dataclasses.replace(f, task=names.get(f.task, f.task)) if f.task is not None else f for f in scenario.faults)
    return dataclasses.replace(scenario, faults=faults)


def with_jobs_of(scenario: Scenario, adapter: Target) -> Scenario:
    """``scenario`` with every job it names by position (``<job 1>``, in its jobs, setup and phase)
    named by the adapter's ``job_ids`` instead; a scenario that names none comes back as it is."""
    jobs = tuple(adapter.resolve_jobs(j) for j in scenario.jobs)
    setup = tuple(adapter.resolve_jobs(a) for a in scenario.setup)
    phase = adapter.resolve_jobs(scenario.phase)
    if (jobs, setup, phase) == (scenario.jobs, scenario.setup, scenario.phase):
        return scenario
    return dataclasses.replace(scenario, jobs=jobs, setup=setup, phase=phase)


def resolve_states(names: tuple[str, ...], adapter: Target) -> frozenset[str]:
    """States named in a family, with ``<final>``, ``<parked>`` and ``<settled>`` resolved for
    ``adapter``'s workflow."""
    final = frozenset(adapter.final_effects())
    settled = frozenset(adapter.settled_states())
    groups = {"<final>": final, "<parked>": settled - final, "<settled>": settled}
    out: set[str] = set()
    for name in names:
        out |= groups.get(name, {name})
    return frozenset(out)


@dataclass
class Family:
    """A scenario prepared once: its template files and the points of its doomed iteration."""

    scenario: Scenario
    template: str
    clock_after_setup: float
    submitted: dict[str, str]
    points: list[Point]
    executable: dict[str, frozenset[int]]
    baseline: "Outcome"
    between: list[bool] = field(default_factory=list)
    # For each point, the first point of its pause class (itself where operations are not counted).
    classes: list[int] = field(default_factory=list)
    # For each point, the first point of its crash class (itself where durable state is not watched).
    crash_classes: list[int] = field(default_factory=list)
    # For the first point of each crash class: what a kill there leaves (the files' content and the
    # clock, see chaos.core.points.DurableState), where it could be read.
    crash_contents: dict[int, Any] = field(default_factory=dict)
    template_db: str = ""  # an adapter's own template database (PostgreSQL); "" = the template's files
    skipped: str = ""  # why the family does not apply to this workflow (its points are not run)
    timeout_s: float | None = None  # the run's bound on a scenario (None: the adapter's, else the default; see chaos.core.hangs)

    @property
    def completed(self) -> bool:
        """Whether the baseline (no fault) ran to the end as the family expects: only then are its
        points run. (A baseline that completed but broke an invariant, a race inside the iteration
        itself, still fails; its points run too and show where.)"""
        return not any(v.invariant in ("baseline", "raised", "hangs") for v in self.baseline.violations)


@dataclass
class Outcome:
    """What one scenario (one point, or the clean baseline) ended with."""

    point: str
    exit: str
    fault: str = "crash"
    violations: list[Violation] = field(default_factory=list)
    wasted_calls: int = 0
    zombie_calls: int = 0
    final_states: dict[str, str] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    tasks: list[str] = field(default_factory=list)  # the paid calls' tasks (the model's task names) it made
    applied: int = 0
    deliveries: int = 0
    seconds: float = 0.0
    blocked_s: float = 0.0
    results: dict[str, str | None] = field(default_factory=dict)  # job -> its result, as stored
    last_errors: dict[str, str | None] = field(default_factory=dict)  # job -> its last_error
    effects: dict[str, str] = field(default_factory=dict)  # applied effect key -> its payload
    error: str = ""  # the last lines of a traceback, when the code under test raised
    raised: dict[str, str] = field(default_factory=dict)  # an exception's text -> the user's line a recovery raised it at
    faults_fired: list[str] = field(default_factory=list)  # the kinds of the world's faults that steps met
    lost_commits: list[str] = field(default_factory=list)  # acknowledged, then taken by a power cut (chaos.hostfaults.power_faults)
    stacks: list[dict[str, Any]] = field(default_factory=list)  # a scenario that hung: its processes' stacks (chaos.core.hangs.stacks_json)

    def __post_init__(self) -> None:
        # An :class:`~chaos.core.process.Exit`, kept as its plain string: outcomes travel to pytest-xdist
        # workers' reports, JSON and pickles, which know str, not enums.
        self.exit = str(self.exit)

    @property
    def held(self) -> bool:
        return not self.violations

    def signature(self) -> tuple[Any, ...]:
        """What two kill modes must agree on at the same point."""
        return (
            tuple(sorted(self.final_states.items())),
            tuple(sorted(self.calls.items())),
            self.applied,
            self.deliveries,
            tuple(sorted({v.invariant for v in self.violations})),
        )


class Run(RunContext):
    """One scenario's run, in its own directory: its own shared clock and world, and the seeds of
    its workers (see :class:`~chaos.core.context.RunContext` for the files).

    Sessions open only in a child (:mod:`chaos.core.process`): the harness's own process never runs
    the code under test.
    """

    def __init__(self, adapter: Target, directory: str, clock_at: float, seed: int, scenario: Scenario,
                 db: str | None = None, *, drop: bool = False) -> None:
        clock = SharedClock(clock_at)
        db = db if db is not None else os.path.join(directory, "engine.db")
        super().__init__(adapter, directory, clock, World.for_adapter(directory, clock, adapter, db), db, drop=drop)
        self.seed = seed
        self.scenario = scenario
        # What the workers' random generators are seeded with besides the seed and their identity:
        # the family's name, but RECOVERY_RNG_SCOPE for the workers of a recovery, which then
        # depends only on what it recovers (see chaos.core.settle.recovery_key).
        self.rng_scope = scenario.name
        self.sessions: list[Any] = []
        self.on_session: Callable[[Any], None] | None = None  # told of every session opened
        self.submitted: dict[str, str] = {}  # job id -> the payload submitted, as JSON
        self.watched = False  # whether this process watches the code under test (effects, raises)

    def session(self, worker_id: str) -> Any:
        if not in_child():
            raise RuntimeError("a scenario's sessions open in a forked child only (chaos.core.process.fork)")
        if not effects.watching() and not self.watched:  # from here on, what the code under test does to the world is seen
            self.watched = True
            effects.watch(self.world.record_escape, roots=(os.path.dirname(os.path.abspath(self.directory)),),
                          allowed=self.target.allowed_effects + effects.declared(), glue=self.world.glue)
            if self.rng_scope == RECOVERY_RNG_SCOPE:  # a recovery: where the user's code raised, for same-outcome
                watch_raises(self.world.record_raised)
        session = self.open_session(worker_id, random.Random(f"{self.seed}:{self.rng_scope}:{worker_id}"))
        self.sessions.append(session)
        if self.on_session is not None:
            self.on_session(session)
        return session

    def close(self) -> None:
        """Close every connection this process opened for the run (a dead child's are gone)."""
        for session in self.sessions:
            close_quietly(session)
        self.sessions.clear()
        self.give_back()

    def evidence(self, submitted: dict[str, str], interruptions: Counter, snapshot: Any = None) -> Evidence:
        return Evidence.gather(self.adapter, self.db, self.world, submitted=submitted, interruptions=interruptions, snapshot=snapshot)

    def only(self, deep: bool) -> Any:
        """The code objects whose lines are points (None: every function under the trace paths)."""
        return None if deep else [fn.__code__ for fn in self.adapter.targets().values()]


def hung_outcome(hung: Hung, point_id: str, fault: str, started: float) -> Outcome:
    """The result of a scenario that did not finish within its bound: a ``hangs`` violation that
    names the process and where it was stuck, with every process's stacks."""
    point = "" if point_id == "baseline" else point_id
    outcome = Outcome(point_id, Exit.HUNG, fault=fault, violations=[hangs(hung.what, point, hung.bound_s, stuck_at(hung.stacks))],
                      stacks=stacks_json(hung.stacks))
    outcome.seconds = time.perf_counter() - started
    return outcome


def watched(adapter: Target, family: Family, point_id: str, fault: str, scenario: Callable[[], Outcome]) -> Outcome:
    """``scenario()`` (one point's, whose id is ``point_id``), or, if it does not finish within the
    family's bound, a ``hangs`` result (see :mod:`chaos.core.hangs`)."""
    started = time.perf_counter()
    try:
        with watchdog(bound_s(adapter.scenario_timeout_s, family.baseline.seconds, given=family.timeout_s)):
            return scenario()
    except Hung as hung:
        return hung_outcome(hung, point_id, fault, started)


def arm_sticky(run: Run) -> None:
    """Arm the scenario's sticky faults in this process's world: a poison input fails the same
    way for every worker that calls with it, not only for the doomed one."""
    for fault in run.scenario.faults:
        if fault.sticky:
            run.world.arm(fault)
