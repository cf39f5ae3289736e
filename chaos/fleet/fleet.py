"""A fleet of real worker processes and an outbox sender, and a chaos monkey that SIGKILLs them.

Used by ``python -m chaos demo`` and ``python -m chaos soak``. Every process is started fresh by
multiprocessing's *forkserver*: a single-threaded server process that has imported the engine
once and forks each new worker from that clean state, never from the parent (whose threads could
hold a lock at the moment of a fork). A restart then costs a fork and a connection, not a Python
start-up and its imports, so a monkey that kills five processes a second does not spend the
machine on restarts. Each process opens its own database connection. The
monkey picks a random moment (exponential gaps with mean ``kill_every_s``) and a random victim,
SIGKILLs it (no ``finally``, no ``atexit``: the process is gone mid-instruction) and starts a
replacement with a new worker id. It stops once every job is settled and every outbox row sent.

A worker process runs :class:`engine.Worker` (step thread, real clock, a short lease so a killed
worker's job is taken over within seconds) on the reference workflow, with the ledger-backed paid
model of :mod:`chaos.fleet.services` and the receiver's document source over loopback HTTP. The sender
process runs :func:`engine.send_outbox` with :class:`engine.HttpSender` to the receiver.

Every loop here has a named bound; a run that does not finish within ``timeout_s`` stops and is
reported as not drained.

>>> FleetConfig(db="demo.db", directory="/tmp/run").kills_due(kills=0, settled_fraction=0.5)
False
>>> FleetConfig(db="demo.db", directory="/tmp/run", kills_min=10).kills_due(kills=2, settled_fraction=0.5)
True
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from engine import NO_PROGRESS, Outcome

from chaos.adapters.postgres import is_postgres
from chaos.fleet.receiver import ReceiverProcess

__all__ = ["FleetConfig", "Fleet", "FleetRun", "Progress", "ProgressPoller", "Kill", "LEASE_S_DEFAULT"]

LEASE_S_DEFAULT = 3.0
LATENCY_MS_DEFAULT = (2.0, 15.0)
IDLE_S = 0.05
TICK_S = 0.05  # the monkey's loop period
POLL_S = 0.25  # how often the parent counts states (progress, and "is it done?")
VICTIM_AGE_S_MIN = 0.2  # a victim has finished starting up: a kill lands in its work, not its start-up
CATCH_UP_GAP_S = 0.3  # when kills lag behind kills_min, kill this often until they catch up
KILLS_BY_FRACTION = 0.8  # kills_min is reached by the time this fraction of the jobs is settled
SENDER_TIMEOUT_S = 2.0
STOP_WAIT_S = 10.0
UNEXPECTED_EXITS_MAX = 20  # processes that die by themselves: a bug; stop restarting after this many
# A process (re)started while a PostgreSQL server restarts or recovers waits this long for it, as a
# deployed worker under a supervisor would, instead of dying at once; the URL was checked before
# any process started, so a connection refused now is the server's state, not a wrong URL.
OPEN_WAIT_S = 60.0
OPEN_DELAY_S_FIRST = 0.05
OPEN_DELAY_S_MAX = 1.0
ITERATIONS_MAX = 100_000_000  # a child's loop bound; the deadline and the parent's death end it first
LOG_TAIL_CHARS = 1500
# What the forkserver imports once, so that a restarted process does not.
PRELOAD = ("engine", "chaos.fleet.fleet", "chaos.fleet.services", "urllib.request", "http.client")
# Outcomes of a claim that ended without committing the step it may have paid for. UNAVAILABLE:
# the database failed under the commit (the server restarted, the connection was terminated), an
# interruption as real as a kill, which the next claim pays for again by right.
ABANDONING = frozenset({Outcome.BUSY, Outcome.LEASE_LOST, Outcome.RETRY, Outcome.UNAVAILABLE})

COUNT_STATES = "SELECT state, COUNT(*) FROM job GROUP BY state"
COUNT_UNSENT = "SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL"


@dataclass(frozen=True)
class FleetConfig:
    """How a fleet runs. ``db`` is a SQLite path or a ``postgresql://`` URL."""

    db: str
    directory: str  # ledgers and logs
    workers: int = 2
    lease_s: float = LEASE_S_DEFAULT
    latency_ms: tuple[float, float] = LATENCY_MS_DEFAULT
    kill_every_s: float = 1.0  # mean gap between kills; 0 = no monkey
    kills_min: int = 0
    kill_sender: bool = True
    seed: int = 0
    timeout_s: float = 600.0
    synchronous: str | None = None  # SQLite's level for every process's store; None: the store's default
    power_every_s: float = 0.0  # mean gap between power cuts (Fleet's power hook); 0 = none

    @property
    def calls_path(self) -> str:
        return os.path.join(self.directory, "calls.db")

    @property
    def receiver_path(self) -> str:
        return os.path.join(self.directory, "receiver.db")

    @property
    def log_dir(self) -> str:
        return os.path.join(self.directory, "logs")

    def kills_due(self, *, kills: int, settled_fraction: float) -> bool:
        """Whether the monkey is behind ``kills_min`` for how far the run has got."""
        target = self.kills_min * min(1.0, settled_fraction / KILLS_BY_FRACTION)
        return kills < target


@dataclass(frozen=True)
class Progress:
    total: int
    states: dict[str, int]
    unsent: int
    settled: int

    @property
    def done(self) -> bool:
        return self.settled >= self.total and self.unsent == 0


@dataclass(frozen=True)
class Kill:
    at_s: float  # seconds since the start
    victim: str  # the killed process's id (a worker id, or sender.N)
    role: str


@dataclass
class FleetRun:
    """What the monkey did, and how the run ended."""

    kills: list[Kill] = field(default_factory=list)
    unexpected_exits: list[str] = field(default_factory=list)
    power_cuts: list[float] = field(default_factory=list)  # seconds since the start of each cut
    seconds: float = 0.0
    started_at: float = 0.0  # wall clock, when the first process was started
    drained: bool = False
    last: Progress | None = None

    @property
    def killed_ids(self) -> set[str]:
        return {k.victim for k in self.kills}


class _Slot:
    """One process position (worker 1, worker 2, ..., the sender) across its incarnations."""

    def __init__(self, role: str, index: int) -> None:
        self.role = role
        self.index = index
        self.incarnation = -1
        self.proc: Any = None  # a multiprocessing Process
        self.started = 0.0

    @property
    def id(self) -> str:
        name = "sender" if self.role == "sender" else f"w{self.index}"
        return f"{name}.{self.incarnation}"


class Fleet:
    """Workers and a sender on ``config.db``, talking to ``receiver``; :meth:`run` until settled."""

    def __init__(self, config: FleetConfig, receiver: ReceiverProcess, settled_states: frozenset[str],
                 power: Callable[[], None] | None = None) -> None:
        if config.workers < 1:
            raise ValueError(f"workers={config.workers} must be >= 1")
        self.config = config
        self.receiver = receiver
        self.settled_states = settled_states
        # Cuts the power of the file system under config.db and brings it back, every process
        # dead and every file on it closed (chaos.hostfaults.power_runs); called every power_every_s.
        self.power = power
        self.rng = random.Random(config.seed)
        self.slots = [_Slot("worker", n + 1) for n in range(config.workers)] + [_Slot("sender", 0)]
        self.context = multiprocessing.get_context("forkserver")
        self.context.set_forkserver_preload(PRELOAD + (("psycopg",) if is_postgres(config.db) else ()))
        self.t0 = time.monotonic()
        os.makedirs(config.log_dir, exist_ok=True)

    # -- processes -------------------------------------------------------------------------------
    def _spec(self, slot: _Slot) -> dict[str, Any]:
        c = self.config
        return {
            "db": c.db, "calls": c.calls_path, "effects_url": self.receiver.url, "documents_url": self.receiver.documents_url,
            "id": slot.id, "lease_s": c.lease_s, "latency_ms": list(c.latency_ms),
            "seed": c.seed * 1_000_003 + slot.index * 1009 + slot.incarnation, "deadline": time.time() + c.timeout_s,
            "synchronous": c.synchronous,
        }

    def _log_path(self, slot: _Slot) -> str:
        return os.path.join(self.config.log_dir, f"{slot.id.split('.')[0]}.log")

    def _start(self, slot: _Slot) -> None:
        slot.incarnation += 1
        slot.proc = self.context.Process(target=child_main, args=(slot.role, self._spec(slot), self._log_path(slot)),
                                         name=slot.id, daemon=True)
        slot.proc.start()
        slot.started = time.monotonic()

    def start(self) -> None:
        for slot in self.slots:
            self._start(slot)

    def stop(self) -> None:
        """Stop every process (the work is done or abandoned: a SIGTERM is as good as a kill)."""
        for slot in self.slots:
            if slot.proc is not None and slot.proc.is_alive():
                slot.proc.terminate()
        for slot in self.slots:
            if slot.proc is None:
                continue
            slot.proc.join(STOP_WAIT_S)
            if slot.proc.is_alive():
                slot.proc.kill()
                slot.proc.join()

    def alive(self) -> int:
        return sum(1 for s in self.slots if s.proc is not None and s.proc.is_alive())

    def _kill(self, slot: _Slot, run: FleetRun) -> None:
        assert slot.proc is not None
        victim = slot.id
        try:
            os.kill(slot.proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # it died by itself a moment ago: _reap reports it
            return
        slot.proc.join(STOP_WAIT_S)
        run.kills.append(Kill(round(time.monotonic() - self.t0, 3), victim, slot.role))
        self._start(slot)

    def _reap(self, run: FleetRun) -> bool:
        """Restart a process that died by itself (a bug: it is reported with its log's tail).

        Returns False once too many did: restarting a process that keeps dying proves nothing.
        """
        for slot in self.slots:
            if slot.proc is None or slot.proc.is_alive():
                continue
            run.unexpected_exits.append(f"{slot.id} exited by itself with status {slot.proc.exitcode}:\n{self._tail(slot)}")
            if len(run.unexpected_exits) >= UNEXPECTED_EXITS_MAX:
                return False
            self._start(slot)
        return True

    def _tail(self, slot: _Slot) -> str:
        try:
            with open(self._log_path(slot), "rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - LOG_TAIL_CHARS))
                return log.read().decode(errors="replace")
        except OSError:
            return "(no log)"

    def _victim(self) -> _Slot | None:
        now = time.monotonic()
        ready = [s for s in self.slots if s.proc is not None and s.proc.is_alive() and now - s.started >= VICTIM_AGE_S_MIN
                 and (self.config.kill_sender or s.role != "sender")]
        return self.rng.choice(ready) if ready else None

    # -- the run ---------------------------------------------------------------------------------
    def run(self, total: int, on_progress: Callable[[Progress, FleetRun], None] | None = None) -> FleetRun:
        """Start everything, kill and restart at random until every job is settled, then stop."""
        c = self.config
        run = FleetRun()
        poller = ProgressPoller(c.db, total, self.settled_states)
        self.t0 = time.monotonic()
        run.started_at = time.time()
        deadline = self.t0 + c.timeout_s
        next_kill = self.t0 + self._gap()
        next_cut = self.t0 + self._power_gap()
        last_kill = self.t0
        last_poll = 0.0
        try:
            self.start()
            for _ in range(int(c.timeout_s / TICK_S) + 2):
                now = time.monotonic()
                if now >= deadline:
                    break
                if now - last_poll >= POLL_S:
                    last_poll = now
                    run.last = poller.poll()
                    run.seconds = now - self.t0
                    if on_progress is not None:
                        on_progress(run.last, run)
                    if run.last.done:
                        run.drained = True
                        break
                if not self._reap(run):
                    break
                if self.power is not None and now >= next_cut:
                    self._power_cycle(run, poller)
                    next_cut = time.monotonic() + self._power_gap()
                fraction = run.last.settled / max(1, total) if run.last else 0.0
                if c.kill_every_s > 0 and c.kills_due(kills=len(run.kills), settled_fraction=fraction):
                    next_kill = min(next_kill, last_kill + CATCH_UP_GAP_S)
                if c.kill_every_s > 0 and now >= next_kill:
                    victim = self._victim()
                    if victim is not None:
                        self._kill(victim, run)
                        last_kill = now
                        # From the planned moment, not from now: a slow tick does not stretch the
                        # mean gap. At most one kill per tick, so a backlog of due kills is spread out.
                        next_kill = max(next_kill + self._gap(), now - 1.0)
                time.sleep(TICK_S)
        finally:
            self.stop()
            poller.close()
        run.seconds = time.monotonic() - self.t0
        return run

    def _power_cycle(self, run: FleetRun, poller: "ProgressPoller") -> None:
        """The power goes: every process dies at once, then the file system is cut and restored
        (self.power), and every process starts again on what survived."""
        assert self.power is not None, "a power cycle needs the power hook"
        at = round(time.monotonic() - self.t0, 3)
        for slot in self.slots:
            if slot.proc is not None and slot.proc.is_alive():
                try:
                    os.kill(slot.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for slot in self.slots:
            if slot.proc is not None:
                slot.proc.join(STOP_WAIT_S)
                run.kills.append(Kill(at, slot.id, slot.role))
        poller.close()
        self.power()
        poller.open()
        run.power_cuts.append(at)
        self.start()

    def _power_gap(self) -> float:
        if self.power is None or self.config.power_every_s <= 0:
            return float("inf")
        return self.rng.uniform(0.5, 1.5) * self.config.power_every_s

    def _gap(self) -> float:
        if self.config.kill_every_s <= 0:
            return float("inf")
        return self.rng.expovariate(1.0 / self.config.kill_every_s)


class ProgressPoller:
    """Counts jobs per state and unsent outbox rows on a read-only connection of its own.

    The database may go away under it (a PostgreSQL server restarting, its backends
    terminated): a failed poll closes the connection, reports the last counts it saw (or none
    settled) and counts the failure in ``failures``; the next poll connects again. The run then
    goes on to its verdict instead of dying with the poller.
    """

    def __init__(self, db: str, total: int, settled_states: frozenset[str]) -> None:
        self.db = db
        self.total = total
        self.settled_states = settled_states
        self.failures = 0
        self.last_error: str | None = None
        self.last = Progress(total, {}, 0, 0)
        self.conn: Any = None
        self.open()

    def open(self) -> None:
        if is_postgres(self.db):
            import psycopg

            self.conn = psycopg.connect(self.db, autocommit=True)
        else:
            # Read-only: the last connection to close on a WAL database checkpoints it (and
            # fsyncs), and a poller must not make the workers' commits durable before a power cut.
            path = os.path.abspath(self.db.removeprefix("sqlite:///"))
            self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)

    def poll(self) -> Progress:
        try:
            if self.conn is None:
                self.open()
            states = {state: count for state, count in self.conn.execute(COUNT_STATES).fetchall()}
            unsent = self.conn.execute(COUNT_UNSENT).fetchone()[0]
        except _database_errors(self.db) as exc:
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {str(exc).strip()}"
            self.close()
            return self.last
        settled = sum(n for state, n in states.items() if state in self.settled_states)
        self.last = Progress(self.total, states, unsent, settled)
        return self.last

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # closing a connection the server already dropped
                pass


def _database_errors(db: str) -> tuple[type[BaseException], ...]:
    """What a poll may meet when the database is away: sqlite3's or psycopg's errors."""
    if is_postgres(db):
        import psycopg

        return (psycopg.Error, sqlite3.Error)
    return (sqlite3.Error,)


# -- the child processes --------------------------------------------------------------------------
def child_main(role: str, spec: dict[str, Any], log_path: str) -> None:
    """The forked process: its output goes to its slot's log, then it works until told to stop."""
    with open(log_path, "ab") as log:
        log.write(f"--- {spec['id']} starts (pid {os.getpid()})\n".encode())
        log.flush()
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    (run_worker if role == "worker" else run_sender)(spec)


def _should_stop(spec: dict[str, Any]) -> bool:
    parent = multiprocessing.parent_process()
    return time.time() >= spec["deadline"] or (parent is not None and not parent.is_alive())


def _store_options(spec: dict[str, Any]) -> dict[str, Any]:
    return {"synchronous": spec["synchronous"]} if spec.get("synchronous") else {}


def open_store_waiting(spec: dict[str, Any]) -> Any:
    """The process's store; on PostgreSQL, waiting (with backoff, up to :data:`OPEN_WAIT_S`) for a
    server that is restarting, starting up or recovering. The last error is raised after that."""
    from engine import InvalidInput, StoreFailed, open_store

    deadline = time.monotonic() + OPEN_WAIT_S
    delay_s = OPEN_DELAY_S_FIRST
    for _ in range(int(OPEN_WAIT_S / OPEN_DELAY_S_FIRST) + 2):
        try:
            return open_store(spec["db"], **_store_options(spec))
        except (StoreFailed, InvalidInput) as exc:
            if not is_postgres(spec["db"]) or time.monotonic() + delay_s > deadline or _should_stop(spec):
                raise
            print(f"{spec['id']}: the database cannot be opened yet ({' '.join(str(exc).split())}); trying again", flush=True)
        time.sleep(delay_s)
        delay_s = min(OPEN_DELAY_S_MAX, delay_s * 2)
    raise AssertionError("open_store_waiting: the deadline ends the loop first")  # a bug guard


def run_worker(spec: dict[str, Any]) -> None:
    """A worker process: claim and run jobs until the deadline or the parent's death."""
    from engine import SystemClock, Worker, reference_workflow

    from chaos.fleet.services import CallLedger, HttpDocuments, LedgerModel, make_probe

    clock = SystemClock()
    rng = random.Random(spec["seed"])
    ledger = CallLedger(spec["calls"])
    model = LedgerModel(ledger, make_probe(spec["db"]), latency_ms=tuple(spec["latency_ms"]),
                        rng=random.Random(rng.random()), clock=clock)
    workflow = reference_workflow(model, HttpDocuments(spec["documents_url"]))
    worker = Worker(open_store_waiting(spec), workflow, worker_id=spec["id"], clock=clock, rng=rng,
                    lease_s=spec["lease_s"], threaded=True)
    for _ in range(ITERATIONS_MAX):
        if _should_stop(spec):
            break
        result = worker.run_once()
        if result.job_id is not None and result.outcome in ABANDONING:
            # This claim ends without the step it may have paid for: the next claim pays again.
            ledger.abandoned(spec["id"], result.job_id, result.outcome, clock.now())
        if result.outcome in NO_PROGRESS:
            time.sleep(IDLE_S * (0.5 + rng.random()))


def run_sender(spec: dict[str, Any]) -> None:
    """The outbox sender process: deliver due rows to the receiver until the deadline."""
    from engine import HttpSender, StoreBusy, StoreFailed, SystemClock, send_outbox

    clock = SystemClock()
    rng = random.Random(spec["seed"])
    store = open_store_waiting(spec)
    sender = HttpSender(spec["effects_url"], timeout_s=SENDER_TIMEOUT_S)
    for _ in range(ITERATIONS_MAX):
        if _should_stop(spec):
            break
        try:
            report = send_outbox(store, sender, clock=clock, rng=rng)
            moved = report.sent + report.failed
        except StoreBusy:  # the database was locked while marking: those rows are sent again later
            moved = 0
        except StoreFailed as exc:
            # The server went away (a restart, the connection terminated): nothing was marked, so
            # those rows are sent again later; the store reconnects on its next use, as a worker's does.
            print(f"{spec['id']}: {' '.join(str(exc).split())}; backing off", flush=True)
            moved = 0
            time.sleep(OPEN_DELAY_S_MAX * (0.5 + rng.random()))
        if moved == 0:
            time.sleep(IDLE_S * (0.5 + rng.random()))
