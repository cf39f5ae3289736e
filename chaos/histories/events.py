"""What can happen in a random history: the events the state machine draws, as data.

Each event is a small frozen dataclass, so Hypothesis prints a failing history as a program a
person can read (``state.step(event=Run(worker='w1', kill=Kill(at=2047, mode='fork')))``) and
shrinks it field by field: a kill towards the first crash point, a clock jump towards 1 s, any
event towards ``Advance(seconds=1)``, the one that changes least.

All events are drawn by one rule (runs with three times the odds of most others, sends and
armed faults with twice; the machine's faults and heals, pauses and resumes share one draw, and
a :class:`Storm`, the costliest event, has a small share of it) rather than one rule each: Hypothesis's "swarm"
selection switches most rules off in many examples, and a history with no runs, or only clock
jumps, tests nothing here.

>>> Run("w1", Kill(at=0, mode="fork"))
Run(worker='w1', kill=Kill(at=0, mode='fork'))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Union

from hypothesis import strategies as st

from chaos.adapter import default_job_ids
from chaos.core.scenario import reference_poison
from chaos.core.target import Target
from chaos.core.world import FAULT_KINDS
from chaos.matrix.families import STORM_JOBS

__all__ = [
    "Advance",
    "Arm",
    "Event",
    "Heal",
    "Human",
    "Kill",
    "KillAfterDelivery",
    "KillBeforeDelivery",
    "Machine",
    "Pause",
    "Resume",
    "Run",
    "Send",
    "Storm",
    "Submit",
    "events",
    "history_jobs",
    "ACTIONS",
    "JOB_IDS",
    "POOL_JOBS",
    "STORM_JOB_IDS",
    "PAYLOADS",
    "POSITIONS",
    "FAULT_TASKS",
    "WORKERS",
    "FREEZABLE",
    "MACHINE_FAULTS",
]

# A small pool of jobs, so that duplicates and conflicts happen: the adapter's first POOL_JOBS
# ids (see history_jobs); JOB_IDS is the pool of an adapter that names none.
POOL_JOBS = 5
JOB_IDS = default_job_ids(POOL_JOBS)
# A storm's herd: as many jobs as the crash matrix's retry storm, the adapter's next ids after the
# pool's (no other event touches them); STORM_JOB_IDS is the herd of an adapter that names none.
STORM_JOB_IDS = default_job_ids(POOL_JOBS + len(STORM_JOBS))[POOL_JOBS:]
WORKERS = ("w1", "w2")
FREEZABLE = WORKERS + ("sender",)  # the processes a pause can freeze
PAYLOADS: dict[str, Callable[[str], Any]] = {
    "plain": lambda job: {"source": job},
    "revised": lambda job: {"source": job, "revision": 2},  # the same id, another payload: a conflict
    "poison": reference_poison,  # the first step refuses it: a failed state to requeue
}
# The calls each fault kind changes anything in (a fault armed elsewhere would be used up for
# nothing): the document source, the model's two tasks, the outbox's receiver.
FAULT_TASKS: dict[str, tuple[str, ...]] = {
    "timeout": ("fetch", "extract", "verify", "send"),
    "connection": ("fetch", "extract", "verify", "send"),
    "rate_limit": ("fetch", "extract", "verify", "send"),
    "server_error": ("fetch", "extract", "verify", "send"),
    "bad_request": ("fetch", "extract", "verify", "send"),
    "parse": ("extract",),
    "verify_fail": ("verify",),
    "slow": ("fetch", "extract", "verify"),
}
ACTIONS = ("requeue", "resolve reverify", "resolve cancel", "cancel")
# A crash point is drawn as a position in [0, POSITIONS) and scaled onto the points a recording of
# the iteration reached: it shrinks towards the first point, whatever the iteration's length.
POSITIONS = 1 << 12
ADVANCE_S_MAX = 300
# Faults of the machine a history can suffer (see :class:`Machine`).
MACHINE_FAULTS = ("disk-full", "lock-held", "clock-back")
DELIVERIES_BEFORE_KILL_MAX = 3


@dataclass(frozen=True)
class Kill:
    """Kill the iteration at a crash point (``at`` of :data:`POSITIONS`), in ``mode``."""

    at: int
    mode: str


@dataclass(frozen=True)
class KillBeforeDelivery:
    """Kill the outbox sender right before its n-th delivery (after anything it did first)."""

    delivery: int
    mode: str


@dataclass(frozen=True)
class KillAfterDelivery:
    """Kill the outbox sender right after its n-th delivery, before it marks anything sent."""

    delivery: int
    mode: str


@dataclass(frozen=True)
class Advance:
    """Move the fake clock: leases expire, backoffs elapse."""

    seconds: int


@dataclass(frozen=True)
class Run:
    """One iteration of a worker; killed at a drawn crash point if ``kill`` is set."""

    worker: str
    kill: Kill | None = None


@dataclass(frozen=True)
class Send:
    """One outbox pass; killed at a crash point, or right before or after a delivery."""

    kill: Kill | KillBeforeDelivery | KillAfterDelivery | None = None


@dataclass(frozen=True)
class Submit:
    """Submit a job id from the pool (the adapter's ids: :func:`history_jobs`) with one of :data:`PAYLOADS`."""

    job: str
    payload: str = "plain"


@dataclass(frozen=True)
class Arm:
    """Arm a fault (one of ``chaos.FAULT_KINDS``) for the next call of ``task`` (see :data:`FAULT_TASKS`)."""

    kind: str
    task: str


@dataclass(frozen=True)
class Human:
    """A person requeues, resolves or cancels a job, whether its state allows that or not."""

    action: str
    job: str


@dataclass(frozen=True)
class Pause:
    """Freeze a worker (or the sender) with SIGSTOP at a drawn point of its next iteration
    (``at`` of :data:`POSITIONS`); it holds what it held there until a :class:`Resume`, or the
    end of the history, wakes it."""

    worker: str
    at: int


@dataclass(frozen=True)
class Resume:
    """Wake a frozen worker with SIGCONT: it finishes its iteration, on the clock everyone shares."""

    worker: str


@dataclass(frozen=True)
class Machine:
    """A fault of the machine itself, present until a :class:`Heal` (or the end of the history):
    ``disk-full`` (no new database page can be written: SQLite's max_page_count at the current
    size on every connection of the workers), ``lock-held`` (another connection holds the write
    lock), ``clock-back`` (every clock steps back an hour at once; a heal does not undo it)."""

    fault: str


@dataclass(frozen=True)
class Heal:
    """The machine's faults go away: space is freed, the write lock released."""


@dataclass(frozen=True)
class Storm:
    """An outage meets a herd: the adapter's sixteen jobs after the pool's (:func:`history_jobs`;
    :data:`STORM_JOB_IDS` by default) are submitted, and each meets the
    crash matrix's retry storm (``chaos.matrix.families.STORM_FAULTS``: its extract fails three
    times in a row, then answers); a worker of its own drains them in a fresh process on a paced
    clock (moved only to the next lease, backoff or outbox row due), so the ledger shows when each
    retry came, and ``retry-spread`` is checked on them. One storm a history: a later one is
    ignored. It waits for a calm machine: ignored while a worker is frozen or the machine is at
    fault (a drain cannot make progress past either)."""


Event = Union[Advance, Run, Send, Submit, Arm, Human, Pause, Resume, Machine, Heal, Storm]


def positions() -> st.SearchStrategy[int]:
    """A crash point's position, spread evenly over [0, POSITIONS): Hypothesis draws small
    integers far more often than large ones, which would put most kills in an iteration's first
    stretch. Multiplying by an odd number modulo the power of two is a one-to-one scramble, and
    0 still maps to 0, so a failure still shrinks towards the first point.

    >>> sorted({p * SCRAMBLE % POSITIONS for p in range(POSITIONS)}) == list(range(POSITIONS))
    True
    """
    return st.integers(0, POSITIONS - 1).map(lambda p: p * SCRAMBLE % POSITIONS)


SCRAMBLE = 2654435761  # odd: a bijection of [0, POSITIONS)


def history_jobs(adapter: Target) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The pool a history's submits and a person's actions draw from, and a storm's herd: the
    target's own job ids (``job_ids(n)``, ``doc-1`` .. by default), so that a history of an
    orders project submits ``order-1001`` and its findings name it, as the matrix's do.

    >>> from chaos import ReferenceAdapter
    >>> from chaos.core.target import resolve
    >>> pool, herd = history_jobs(resolve(ReferenceAdapter()))
    >>> pool == JOB_IDS, herd[0], len(herd)
    (True, 'doc-6', 16)
    """
    ids = adapter.job_ids(POOL_JOBS + len(STORM_JOBS))
    return ids[:POOL_JOBS], ids[POOL_JOBS:]


def events(modes: Iterable[str], jobs: tuple[str, ...] = JOB_IDS) -> st.SearchStrategy[Event]:
    """Every event (runs three times as often as most others); kills use the given ``modes``;
    submits and a person's actions name the ``jobs`` of the pool (the adapter's: see
    :func:`history_jobs`). Pauses (and resumes) come with ``fork`` among the modes: only a
    process can be frozen.

    The pool is built into the strategy, not looked up when an event runs, so that a failing
    history prints the very ids its findings name (``Submit(job='order-1001', ...)``).

    Events with few possible values are drawn whole from a list (one choice, cheap to draw and
    to shrink) rather than field by field.
    """
    modes = tuple(modes)
    mode = st.sampled_from(modes)
    kill = st.none() | st.builds(Kill, at=positions(), mode=mode)
    deliveries = st.integers(1, DELIVERIES_BEFORE_KILL_MAX)
    around_delivery = st.builds(KillBeforeDelivery, delivery=deliveries, mode=mode) | st.builds(KillAfterDelivery, delivery=deliveries, mode=mode)

    def run() -> st.SearchStrategy[Run]:
        return st.builds(Run, worker=st.sampled_from(WORKERS), kill=kill)

    def send() -> st.SearchStrategy[Send]:
        return st.builds(Send, kill=kill | around_delivery)

    # Runs three times as often, sends twice: they (and their kills) are what the other events
    # prepare, and a third run keeps their share where it was before pauses and machine faults.
    # (Two equal strategy objects would count once: one_of drops repeats of the same object.)
    # The machine's faults and heals, and (when kills fork) pauses and resumes, share one branch:
    # together as likely as one fault armed.
    # A storm (sixteen jobs drained at once, the costliest event) takes one share in seven of it.
    machine: st.SearchStrategy[Event] = st.sampled_from(
        [Machine(fault) for fault in MACHINE_FAULTS] + [Heal()] * len(MACHINE_FAULTS) + [Storm()]
    )
    if "fork" in modes:
        machine = machine | st.builds(Pause, worker=st.sampled_from(FREEZABLE), at=positions()) | st.sampled_from(
            [Resume(worker) for worker in FREEZABLE]
        )
    return st.one_of(
        st.builds(Advance, seconds=st.integers(1, ADVANCE_S_MAX)),
        run(),
        send(),
        run(),
        send(),
        st.sampled_from([Submit(job, payload) for job in jobs for payload in PAYLOADS]),
        st.sampled_from([Arm(kind, task) for kind in FAULT_KINDS for task in FAULT_TASKS[kind]]),
        st.sampled_from([Arm(kind, task) for kind in FAULT_KINDS for task in FAULT_TASKS[kind]]),
        st.sampled_from([Human(action, job) for action in ACTIONS for job in jobs]),
        machine,
        run(),
    )
