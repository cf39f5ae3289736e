"""Faults of the machine itself: a full disk, I/O errors, a held write lock, clock jumps, damaged rows.

Workers do not only die; the machine under them misbehaves. Each fault here has a real
mechanism, injected at a point of the worker's iteration (just before it reads the clock or talks
to the database, where such a fault can show):

* ``disk-full``: SQLite's ``SQLITE_FULL``, by lowering the worker connection's
  ``PRAGMA max_page_count`` to the database's current size;
* ``io-eio`` / ``io-enospc``: ``EIO`` (also from ``fsync``) or ``ENOSPC`` from ``write`` and
  ``pwrite`` in the worker process, through libfiu's POSIX preload: the worker runs in a process
  started by ``fiu-run -x``, enables the failure itself at the point, and the harness disables it
  from outside with ``fiu-ctrl``;
* ``lock-held``: another process holds ``BEGIN IMMEDIATE`` longer than the worker's busy timeout
  (on PostgreSQL: a transaction holding the engine's tables ``IN EXCLUSIVE MODE``, which lets
  reads through and makes every write wait, longer than the worker's ``lock_timeout``);
* ``clock-back`` / ``clock-forward``: every clock steps back an hour, or leaps three hours ahead,
  while the worker is frozen at the point and another one runs; ``clock-skew``: the frozen
  worker's lease is taken over, then its own clock (only its own) steps back an hour;
* ``damage-payload`` / ``damage-state`` / ``damage-memo``: a job's payload, its state or one of
  its memo rows is overwritten with what the engine never writes (with SQL, on either backend).
* ``power-full`` / ``power-normal``: the worker is killed at the point, then the power of the
  ext4 image that holds the database is cut (its journal unflushed) and restored, at
  ``synchronous=FULL`` or ``NORMAL``; run by :mod:`chaos.hostfaults.power_faults`, checked by
  :mod:`chaos.hostfaults.power_checks` (``durable-commits`` under FULL), not by the frozen-worker
  machinery below.

The worker then runs on with the fault present, the fault is removed, and the *same* worker
process must drain the database (:mod:`chaos.hostfaults.worker`). Checked after each fault
(:mod:`chaos.hostfaults.checks`): ``integrity`` (``PRAGMA integrity_check``),
``acknowledged-kept``, ``worker-survives``, ``lease-respected``, ``quarantined``, and the whole
invariant catalog once the system drained.

On PostgreSQL (an adapter whose databases are not files, e.g. ``chaos:postgres_adapter``) the
lock, clock and damage faults run with the mechanisms above; ``integrity`` is a consistency query
there (see :func:`chaos.hostfaults.checks.integrity`). The disk and io faults are refused
(:func:`refuse_on_a_server`): both act on the database file through the worker's own process,
and on PostgreSQL the server, not the worker, writes the files.

>>> sorted(MACHINE_FAULTS)
['clock', 'damage', 'disk', 'io', 'lock', 'power']
>>> KIND_OF["clock-skew"]
'clock'
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TYPE_CHECKING

from chaos.adapter import job_ref
from chaos.adapters.reference import HUMAN_WRITER
from chaos.core import libfiu
from chaos.core.invariants import Violation, point_reached
from chaos.hostfaults.checks import (
    CHECKS,
    acknowledged_kept,
    integrity,
    lease_respected,
    quarantined,
    worker_survives,
)
from chaos.hostfaults.worker import IO_FAILURES, Page, doomed_worker, drain, working
from chaos.core.store_faults import DAMAGED_JSON, DAMAGED_STATE, HeldLock, ScenarioDb
from chaos.adapters.postgres import is_postgres
from chaos.core.points import Point
from chaos.hostfaults.power import LESSONS as POWER_LESSONS
from chaos.hostfaults.power import POWER_KINDS
from chaos.hostfaults.power_faults import run_power_cut
from chaos.core.process import Exit, fork, run_in_child
from chaos.core.freeze import other_worker
from chaos.core.prepare import setup_action
from chaos.core.settle import recover_and_check
from chaos.core.template import copy_template
from chaos.core.scenario import (
    DOOMED,
    EXIT_NOT_REACHED,
    Family,
    Outcome,
    Scenario,
    Run,
    watched,
)
from chaos.core.world import Fault

if TYPE_CHECKING:
    from chaos.core.target import Target

__all__ = [
    "CHECKS",
    "KIND_OF",
    "LESSONS",
    "MACHINE_FAULTS",
    "expand",
    "machine_points",
    "machine_scenarios",
    "refuse_on_a_server",
    "refuse_without_schema",
    "run_machine_fault",
    "run_preloaded",
    "start_preloaded",
]

MACHINE_FAULTS: dict[str, tuple[str, ...]] = {
    "disk": ("disk-full",),
    "io": ("io-eio", "io-enospc"),
    "lock": ("lock-held",),
    "clock": ("clock-back", "clock-forward", "clock-skew"),
    "damage": ("damage-payload", "damage-state", "damage-memo"),
    "power": POWER_KINDS,  # a power cut after the kill: chaos.hostfaults.power_faults
}
KIND_OF = {sub: kind for kind, subs in MACHINE_FAULTS.items() for sub in subs}
LESSONS = {
    "disk-full": "A full disk fails the transaction, never the worker: nothing of it is written, the job waits out its lease, and the same worker finishes it once there is space.",
    "io-eio": "An I/O error is a failed transaction, not a dead worker: it backs off, and the job is taken up again when the disk answers.",
    "io-enospc": "ENOSPC from write is SQLite's 'disk full': the same rollback, the same backoff, nothing committed lost.",
    "lock-held": "A write lock held past the busy timeout means 'try again later', never 'no work' and never a crash.",
    "clock-back": "A clock that steps back makes leases and backoffs last longer, never shorter: no job is taken while its lease is valid by the claimer's clock.",
    "clock-forward": "A clock that leaps hours ahead expires every lease and backoff at once: others take over, and fencing stops the worker that was frozen.",
    "clock-skew": "A worker whose own clock stepped back still believes in a lease that was taken over: only the fencing token, never its clock, may decide that it writes.",
    "damage-payload": "A payload that is not JSON is quarantined in a failed state with a clear last_error, and the loop goes on with the other jobs.",
    "damage-state": "A state the table does not know is quarantined, not crashed on: its memo rows make the requeue cheap.",
    "damage-memo": "A memo row that does not parse is quarantined with the repair in last_error, never silently re-paid.",
    **POWER_LESSONS,
}
# The lines at which a machine fault can show: just before the worker reads the clock or talks to
# the database, while it holds no transaction (a fault taken there shows at its next statement).
MARKERS = (".execute(", ".now()")
CLOCK_STEP_BACK_S = 3600.0
CLOCK_LEAP_S = 3 * 3600.0
REMOVAL_WAIT_S_MAX = 30.0


# Why a fault kind cannot run where the scenario databases live on a server (PostgreSQL), and what
# to do instead. Every other kind runs there.
ON_A_SERVER_REFUSED = {
    "disk": (
        "it lowers SQLite's max_page_count on the worker's own connection to make the next write fail with "
        "SQLITE_FULL, and on PostgreSQL the server, not the worker, writes the database files: there is no "
        "per-connection page limit, and filling the server's disk would test the server, not the worker"
    ),
    "power": (
        "it cuts the power of the ext4 image that holds the scenario's database files, and on PostgreSQL the server "
        "keeps its files; python -m chaos soak --backend postgresql --power-every 3 --lease 1 (and python -m benchmarks) "
        "cut the power of a server whose data directory is on an image"
    ),
    "io": (
        "libfiu makes the worker process's own write and fsync calls fail, and on PostgreSQL the worker writes "
        "no database file (it talks to the server over a socket): failing its writes would break the socket, "
        "not the disk"
    ),
}


def refuse_on_a_server(faults: Any, db: str | None = None, target: Any = None) -> None:
    """Raise ValueError if ``faults`` (machine sub-kinds) include one that has no faithful
    mechanism where the scenario databases live on a server: given a ``db`` server
    (``postgresql://...``), or a ``target`` (:class:`chaos.core.target.Target`) whose databases are not files (it
    builds its own template database). The message names each such kind, why, and the fix.

    >>> refuse_on_a_server(["lock-held", "clock-skew"], "postgresql://admin@db.test/postgres")
    >>> refuse_on_a_server(["disk-full"], None)   # SQLite files: every kind runs
    >>> refuse_on_a_server(["io-eio"], "postgresql://admin@db.test/postgres")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: the io fault kind (io-eio) cannot run on PostgreSQL: libfiu makes ... run io on SQLite (...)...
    """
    on_a_server = db is not None or (target is not None and target.server is not None)
    if not on_a_server:
        return
    kinds = sorted({KIND_OF[sub] for sub in faults if KIND_OF.get(sub) in ON_A_SERVER_REFUSED})
    if kinds:
        reasons = "; ".join(
            f"the {kind} fault kind ({', '.join(sub for sub in faults if KIND_OF.get(sub) == kind)}) cannot run on PostgreSQL: "
            f"{ON_A_SERVER_REFUSED[kind]}"
            for kind in kinds
        )
        named = " and ".join(kinds)
        raise ValueError(
            f"{reasons}. Leave {named} out of --faults here and run {named} on SQLite (python -m chaos matrix "
            f"--faults {','.join(kinds)}, without --db or --backend postgresql); lock, clock and damage run on PostgreSQL"
        )


def refuse_without_schema(faults: Any, adapter: Target, name: str, db: str | None = None) -> None:
    """Raise ValueError if ``faults`` (machine sub-kinds) include one that writes the engine's
    rows, or on PostgreSQL locks its tables, and ``adapter`` declares no ``schema`` to find them
    by (the harness reads no engine table itself). The message names the kinds and the fix.

    >>> class Bare:  # a target that declares no schema, on SQLite files
    ...     schema = server = None
    >>> refuse_without_schema(["clock-back", "lock-held"], Bare(), "mine:adapter")  # SQLite: none needs it
    >>> refuse_without_schema(["damage-memo"], Bare(), "mine:adapter")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: target 'mine:adapter' declares no schema, which damage-memo needs: ... or leave damage out of --faults
    """
    if adapter.schema is not None:
        return
    on_a_server = db is not None or adapter.server is not None
    needing = [sub for sub in faults if KIND_OF.get(sub) == "damage" or (on_a_server and sub == "lock-held")]
    if needing:
        kinds = sorted({KIND_OF[sub] for sub in needing})
        raise ValueError(
            f"target {name!r} declares no schema, which {', '.join(needing)} needs: the harness overwrites a stored "
            "payload, state or memo row, or locks the tables on PostgreSQL, by the tables it names. Give the adapter "
            "schema = chaos.adapters.sql.SqlSchema(...) (SqliteAdapter declares one), or leave "
            f"{' and '.join(kinds)} out of --faults"
        )


def machine_scenarios() -> list[Scenario]:
    """The family the machine faults add to the matrix: two jobs, the first one retried once.

    Its first job's extract times out, so that job comes back after a backoff and reads its memo
    rows and payload again (where damage shows), and a second job waits behind it (which a fault
    in the first job's run must not hold up).
    """
    return [
        Scenario(
            "backlog",
            "A fault of the machine in one job's run leaves that job recoverable, and the other jobs are still processed.",
            jobs=tuple(job_ref(n) for n in (1, 2, 3)),  # the adapter's first three jobs
            faults=(Fault("timeout", task="extract"),),
        )
    ]


def expand(fault: str) -> tuple[str, ...]:
    """The sub-kinds a ``--faults`` entry names: a kind (``clock``) or one sub-kind (``clock-skew``)."""
    return MACHINE_FAULTS.get(fault) or ((fault,) if fault in KIND_OF else ())


def machine_points(family: Family, source: Callable[[str, int], str]) -> list[int]:
    """Indexes of the family's points where a machine fault is injected (see :data:`MARKERS`)."""
    between = family.between or [True] * len(family.points)
    return [
        i for i, p in enumerate(family.points)
        if between[i] and any(marker in source(p.file, p.line) for marker in MARKERS)
    ]


# -- in the harness ---------------------------------------------------------------------------------
def run_machine_fault(adapter: Target, family: Family, point: Point, workdir: str, *, seed: int, fault: str, deep: bool = True) -> Outcome:
    """Inject ``fault`` (a sub-kind, e.g. ``disk-full``) at ``point``, remove it, drain, check."""
    if fault not in KIND_OF:
        raise ValueError(f"machine fault {fault!r} is not one of: {', '.join(KIND_OF)}")
    refuse_on_a_server([fault], target=adapter)
    if KIND_OF[fault] == "power":
        return run_power_cut(adapter, family, point, workdir, seed=seed, fault=fault, deep=deep)
    if fault in IO_FAILURES and not libfiu.preloaded():
        raise ValueError(f"the {fault} fault runs in a process started by fiu-run -x: use run_matrix, or run_preloaded")
    return watched(adapter, family, point.id, fault, lambda: _machine_fault(adapter, family, point, workdir, seed=seed, fault=fault, deep=deep))


def _machine_fault(adapter: Target, family: Family, point: Point, workdir: str, *, seed: int, fault: str, deep: bool) -> Outcome:
    started = time.perf_counter()
    directory = os.path.join(workdir, "point")
    db = copy_template(family, directory, adapter)  # a PostgreSQL database of its own, dropped with the run
    run = Run(adapter, directory, family.clock_after_setup, seed, family.scenario, db, drop=db is not None)
    try:
        return _run_machine_fault(adapter, family, point, run, fault=fault, deep=deep, started=started)
    finally:
        run.close()  # the scenario's own database is dropped even when the harness fails


def _run_machine_fault(adapter: Target, family: Family, point: Point, run: Run, *, fault: str, deep: bool, started: float) -> Outcome:
    only = run.only(deep)
    page = Page()
    child = fork(lambda: doomed_worker(run, point, only, fault, page))  # it ends by os._exit: its wait status says how
    pid = child.pid
    _, status = os.waitpid(pid, os.WUNTRACED)
    problems: list[Violation] = []
    interruptions: Counter = Counter()
    damage: _Damage | None = None
    before = None
    exit_kind = "not-reached"
    if os.WIFSTOPPED(status):
        exit_kind = "faulted"
        lock, found = None, True
        try:
            before = adapter.inspect(run.db)
            if KIND_OF[fault] in ("disk", "io"):
                pass  # the worker injected its own fault at the point
            elif _nobody_writing(run.db):
                lock, damage, found, interruptions = _act(run, fault, page, problems)
            else:
                # The frozen process holds the write lock (SQLite) or an open transaction with row
                # locks (PostgreSQL) here, a second worker inside its slow call: the harness
                # cannot take the lock or write a row, so it injects nothing.
                found = False
        except BaseException:
            os.kill(pid, signal.SIGKILL)  # never leave a stopped worker behind
            os.waitpid(pid, 0)
            raise
        os.kill(pid, signal.SIGCONT)
        status = _remove_when_waiting(run, pid, fault, page, lock)
        interruptions |= Counter({tuple(key): 1 for key in page.read().get("interruptions", [])})
        if KIND_OF[fault] in ("disk", "io", "lock") and page.errors == 0:
            exit_kind = "no-effect"  # no statement needed what the fault took away
        if not found:
            exit_kind = "no-effect"  # nothing there to damage, or the lock was the frozen worker's
    elif os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_NOT_REACHED:
        # The point was recorded in a clean run of this very iteration: a worker that ran to its
        # end without reaching it met no fault, and its scenario must not read as one that held.
        problems.append(point_reached(f"the worker to meet the {fault} fault"))
    child.forget()  # reaped above
    died_of = page.read().get("error")
    if died_of is not None:  # the worker died of the fault: its steps in flight were interrupted, as by a kill
        interruptions |= Counter(working(run))
    problems += worker_survives(status, died_of, lambda: _restart(run))
    after = adapter.inspect(run.db) if exit_kind != "not-reached" or damage is not None else None  # read once, for both checks
    if exit_kind != "not-reached":
        problems += integrity(run.db, adapter.schema)
        state_damaged = damage.job_id if damage is not None and damage.kind == "damage-state" else None
        problems += acknowledged_kept(adapter, before, after, state_damaged)
    if damage is not None:
        settled = adapter.settled_states()
        bitten, seen = quarantined(after, damage.job_id, damage.what, settled,
                                   state_damaged=damage.kind == "damage-state", parked=settled - set(adapter.final_effects()))
        problems += seen
        if not bitten and damage.kind != "damage-state":
            exit_kind = "no-effect"
        damage.repair(run)
    # A damaged row is meant to change its job's outcome (it is quarantined): only the other
    # faults of the machine must leave the outcome as it is without any fault.
    outcome = recover_and_check(run, family, interruptions, point.id, exit_kind, compare=damage is None)
    seen_now = {str(v) for v in outcome.violations}
    outcome.violations = [v for v in problems if str(v) not in seen_now] + outcome.violations
    outcome.fault = fault
    outcome.seconds = time.perf_counter() - started
    return outcome


def _restart(run: Run) -> str | None:
    """A fresh worker, in a process of its own, drains what the dead (or stuck) one left; what
    went wrong, if anything."""

    def body() -> str | None:
        session = run.session("w-restarted")
        try:
            return None if drain(run, session) else "a restarted worker did not drain the database either"
        except Exception as exc:  # the restarted worker's loop must survive what is left
            return f"a restarted worker raised {type(exc).__name__}: {exc}"
        finally:
            run.close()

    ended = fork(body).wait()
    return ended.value if ended.exit is Exit.FINISHED else f"a restarted worker's process ended: {ended.exit} {ended.error}"


def _act(run: Run, fault: str, page: Page, problems: list[Violation]) -> tuple[Any, _Damage | None, bool, Counter]:
    """What the harness does while the worker is frozen at the point (it injected its own
    disk-full or io fault already). Returns the lock it holds, the damage done, whether there was
    something to damage, and the steps the fault interrupted."""
    interruptions: Counter = Counter()
    if fault == "lock-held":
        lock = HeldLock.take(run.db, run.adapter.schema)  # held until the worker has run on against it a few times
        return lock, None, lock is not None, interruptions
    if KIND_OF[fault] == "damage":
        damage = _Damage.apply(run, fault)
        return None, damage, damage is not None, interruptions
    if fault == "clock-back":
        run.clock.advance(-CLOCK_STEP_BACK_S)
        leases = _leases(run, run.clock.now())
        _, other = other_worker(run, "w-other")
        problems += other + lease_respected(leases, _leases(run, float("-inf")))
    elif fault == "clock-forward":
        interruptions = Counter(working(run))  # the frozen worker's lease expires: its step is interrupted
        run.clock.advance(CLOCK_LEAP_S)
        _, other = other_worker(run, "w-other")
        problems += other
    elif fault == "clock-skew":
        interruptions = Counter(working(run))
        run.clock.advance(run.adapter.lease_s + 1)
        # Another worker takes the job over and is frozen in its turn before it writes anything,
        # so the job is where the first worker left it, under a lease that is no longer its own.
        run_in_child(lambda: setup_action(run, None, "claim:w-other"), what="another worker's claim")
        # Then only the first worker's clock steps back: an hour before the moment it froze, so
        # that by its own clock the lease it lost is valid again.
        page.offset_s = -(run.adapter.lease_s + 1 + CLOCK_STEP_BACK_S)
    return None, None, True, interruptions


def _nobody_writing(db: str) -> bool:
    """No other connection is inside a write: on SQLite the write lock is free; on PostgreSQL no
    other client session of the database has a transaction open (it may hold row locks)."""
    if is_postgres(db):
        with ScenarioDb(db) as conn:
            return conn.execute(OPEN_TRANSACTIONS_PG).fetchone()[0] == 0
    conn = sqlite3.connect(db, isolation_level=None, timeout=0)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


OPEN_TRANSACTIONS_PG = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
    "AND backend_type = 'client backend' AND xact_start IS NOT NULL"
)
# PostgreSQL's equivalent of SQLite's BEGIN IMMEDIATE: EXCLUSIVE conflicts with every write (and
# with SELECT ... FOR UPDATE) but not with plain reads, so the worker's writes wait, time out
# (lock_timeout) and are rolled back, while its reads and the harness's inspection go on.


def _remove_when_waiting(run: Run, pid: int, fault: str, page: Page, lock: Any) -> int:
    """Wait until the worker has run on under the fault, remove the fault, and wait for its end."""
    deadline = time.monotonic() + REMOVAL_WAIT_S_MAX
    ended = None
    while page.phase != Page.WAITING and time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            ended = status
            break
        time.sleep(0.001)
    if KIND_OF[fault] == "io" and ended is None:
        _disable_io(pid, fault)
    if lock is not None:
        lock.release()
    page.removed = 1
    if ended is None:
        _, ended = os.waitpid(pid, 0)
    _remove_fifos(pid)
    return ended


def _disable_io(pid: int, fault: str) -> None:
    """``fiu-ctrl -c 'disable name=...' PID``: the disk answers again, from outside the worker."""
    commands = [arg for name, _ in IO_FAILURES[fault] for arg in ("-c", f"disable name={name}")]
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "FIU_CTRL_FIFO", "FIU_ENABLE")}
    subprocess.run(["fiu-ctrl", "-f", _fifo_prefix(), *commands, str(pid)], env=env, check=True, timeout=REMOVAL_WAIT_S_MAX,
                   stdout=subprocess.DEVNULL)


def _fifo_prefix() -> str:
    return os.environ.get("FIU_CTRL_FIFO") or os.path.join(os.environ.get("TMPDIR", "/tmp"), "fiu-ctrl")


def _remove_fifos(pid: int) -> None:
    """A worker that ended by os._exit leaves libfiu's control fifos behind."""
    if "FIU_CTRL_FIFO" in os.environ:
        for suffix in (".in", ".out"):
            try:
                os.unlink(f"{_fifo_prefix()}-{pid}{suffix}")
            except FileNotFoundError:
                pass


def _leases(run: Run, now: float) -> dict[str, tuple[Any, float, str]]:
    """job -> (token, lease_until, owner) of every lease still valid at ``now``, as the adapter sees them."""
    jobs = run.adapter.inspect(run.db).jobs
    return {job_id: (j.lease_token, j.lease_until, j.lease_owner) for job_id, j in jobs.items()
            if j.lease_owner is not None and j.lease_until is not None and j.lease_until > now}


class _Damage:
    """One row the harness overwrote with what the engine never writes, and how to undo it."""

    def __init__(self, kind: str, job_id: str, step: str | None, original: str) -> None:
        self.kind = kind
        self.job_id = job_id
        self.step = step
        self.original = original
        self.what = {"damage-payload": "payload", "damage-state": "state"}.get(kind, f"memo row of step {step!r}")

    @classmethod
    def apply(cls, run: Run, fault: str) -> _Damage | None:
        """Damage a row of an unsettled job that the worker will read again, if there is one,
        through the adapter's schema (the jobs chosen from what its ``inspect`` shows)."""
        adapter = run.adapter
        schema = adapter.schema  # refuse_without_schema checked it is there
        snapshot = adapter.inspect(run.db)
        settled = adapter.settled_states()
        # The jobs the worker will read again, the one the frozen worker holds last (an unleased
        # job first, then one another worker holds).
        jobs = sorted((j for j in snapshot.jobs.items() if j[1].state not in settled),
                      key=lambda j: (0 if j[1].lease_owner is None else 1 + (j[1].lease_owner == DOOMED), j[0]))
        with ScenarioDb(run.db, writer=HUMAN_WRITER) as conn:  # the audit triggers name the writer
            if fault == "damage-memo":
                steps = list(adapter.step_states())
                # Each job's first memo row in the workflow's order: the one read again first.
                found = next(((job_id, step) for job_id, _ in jobs for step in steps if (job_id, step) in snapshot.memos), None)
                if found is None:
                    return None
                original = schema.overwrite(conn, found[0], "memo", DAMAGED_JSON, step=found[1], unaudited=True)
                return None if original is None else cls(fault, found[0], found[1], original)
            if fault == "damage-state":
                # The job the frozen worker holds first: its next write meets the damage. A job
                # nobody will claim (no next_run_at) is not the worker's to find.
                jobs = sorted((j for j in jobs if j[1].next_run_at is not None), key=lambda j: (j[1].lease_owner != DOOMED, j[0]))
            if not jobs:
                return None
            job_id = jobs[0][0]
            what, value = ("payload", DAMAGED_JSON) if fault == "damage-payload" else ("state", DAMAGED_STATE)
            # Unaudited: the overwrite is not the engine's move (a damaged state is noted as the
            # harness's own, whose quarantine legal-transitions accepts).
            original = schema.overwrite(conn, job_id, what, value, unaudited=True)
            return None if original is None else cls(fault, job_id, None, original)

    def repair(self, run: Run) -> None:
        """What an operator does after the quarantine: put back the payload that was submitted
        (so that re-submitting it stays a no-op). Damaged memo rows and states stay as they are."""
        if self.kind != "damage-payload":
            return
        with ScenarioDb(run.db, writer=HUMAN_WRITER) as conn:
            run.adapter.schema.overwrite(conn, self.job_id, "payload", self.original)


# -- the io faults need libfiu's preload in the process that forks the worker ------------------------
def start_preloaded(share: Any, items: list[Any]) -> libfiu.UnderFiu | None:
    """Start running matrix work items in a lean process started by ``fiu-run -x`` (see
    :mod:`chaos.matrix.zygote`), given ``share`` (a :class:`chaos.matrix.work.Share`); None if
    there are none. Its ``result()`` is their outcomes.

    The forked workers inherit libfiu's POSIX wrappers; each enables its failure at its point and
    the harness disables it with ``fiu-ctrl`` through the control fifos under the work directory.
    """
    if not items:
        return None
    return libfiu.UnderFiu("chaos.matrix.zygote", (share.for_items([items]), [items]), share.workdir, "fiu-zygote")


def run_preloaded(share: Any, items: list[Any]) -> list[Any]:
    """The outcomes of :func:`start_preloaded`, waited for."""
    started = start_preloaded(share, items)
    return started.result() if started is not None else []
