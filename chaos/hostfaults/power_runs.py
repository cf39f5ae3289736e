"""Power cuts during a run of real worker processes: what each durability setting really loses.

The soak's fleet (workers and the outbox sender, real processes) runs with its database on an
ext4 image (:class:`chaos.hostfaults.power.PowerImage`); its ledgers (the paid model's, the receiver's)
stay on the ordinary disk: they stand for the outside world, which keeps what it was paid and
what it applied. Every ``power_every_s`` (on average) the fleet kills every process at once and
calls :class:`PowerCuts`, which reads what had been acknowledged, cuts the power, brings it back,
reads what survived, and records the difference (:mod:`chaos.hostfaults.power_checks`); then every process
starts again on what survived. At the end the whole catalog judges the history, with every
outcome of a step a cut took (a memo row, a parked failure, a scheduled retry) counted as one more
interruption of that step.

On PostgreSQL the server's data directory is on the image, with ``fsync=on`` and the
``synchronous_commit`` under test; a cut shuts the file system down first and then kills every
server process (the server dies with the machine), and the server is started again on the same
directory, recovering from its WAL.

:func:`power_rows` gives ``python -m benchmarks`` its table: per setting, acknowledged commits
lost per power cut, wasted calls, effects re-sent, and the commit rate the setting costs.

>>> SETTINGS["sqlite-full"].level, SETTINGS["postgresql-commit-off"].level
('FULL', 'off')
"""

from __future__ import annotations

import gc
import os
import shutil
import signal
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from chaos.fleet.fleet import FleetConfig
from chaos.core.invariants import Violation
from chaos.hostfaults.checks import integrity
from chaos.adapters.postgres import adapter_for
from chaos.core.target import resolve
from chaos.hostfaults.power import PowerImage, PowerUnavailable, power_missing, sync_tree
from chaos.hostfaults.power_checks import commits_lost, durable_commits, lost_commits, lost_interruptions, read_acknowledged
from chaos.fleet.trial import Trial, TrialResult

__all__ = ["PowerCuts", "PowerRun", "Powered", "SETTINGS", "Setting", "commit_rates", "level_setting", "power_rows", "power_run", "powered"]

IMAGE_MB = 256
SERVER_EXIT_WAIT_S = 10.0
COMMIT_RATE_S = 0.4  # how long one round of the commit-rate probe commits
COMMIT_RATE_ROUNDS, COMMIT_RATE_ROUNDS_QUICK = 5, 1
COMMIT_RATE_MAX = 100_000  # its bound on commits
BENCH_JOBS, BENCH_JOBS_QUICK = 600, 60
# A cut every few leases: a job claimed before a cut waits out its lease after it, so cuts that
# come faster than leases expire would starve every job of a worker.
BENCH_LEASE_S = 1.0
BENCH_CUT_EVERY_S, BENCH_CUT_EVERY_S_QUICK = 3.0, 2.0
BENCH_WORKERS = 2
QUICK_SETTINGS = ("sqlite-normal", "sqlite-full")
# With synchronous=OFF nothing is ever fsynced, not even at a checkpoint: a cut rolls the database
# back to what the kernel's writeback last wrote (up to ~30 s ago), so under cuts every few
# seconds a run makes almost no durable progress. It is measured for this long, then stopped.
OFF_TIMEOUT_S = 45.0  # a smoke test of the mechanism, not figures to quote


@dataclass(frozen=True)
class Setting:
    """One durability setting: the backend and its level (SQLite's synchronous, PostgreSQL's
    synchronous_commit, with fsync=on), and whether it promises that no acknowledged commit is lost."""

    backend: str
    level: str
    durable: bool
    label: str


SETTINGS = {
    "sqlite-off": Setting("sqlite", "OFF", False, "SQLite, synchronous=OFF"),
    "sqlite-normal": Setting("sqlite", "NORMAL", False, "SQLite, synchronous=NORMAL (the default)"),
    "sqlite-full": Setting("sqlite", "FULL", True, "SQLite, synchronous=FULL"),
    "postgresql-commit-off": Setting("postgresql", "off", False, "PostgreSQL, fsync=on, synchronous_commit=off"),
    "postgresql-commit-on": Setting("postgresql", "on", True, "PostgreSQL, fsync=on, synchronous_commit=on (its defaults)"),
}


def level_setting(backend: str, level: str) -> Setting:
    """The setting a soak's ``--synchronous`` names on ``backend`` (SQLite: OFF, NORMAL, FULL;
    PostgreSQL: synchronous_commit off or on); ValueError naming the choices otherwise.

    >>> level_setting("sqlite", "full").label
    'SQLite, synchronous=FULL'
    """
    for setting in SETTINGS.values():
        if setting.backend == backend and setting.level.lower() == level.lower():
            return setting
    choices = ", ".join(s.level for s in SETTINGS.values() if s.backend == backend)
    raise ValueError(f"--synchronous {level}: on {backend} choose one of {choices}")


@dataclass
class Cut:
    at_s: float
    lost: list[str]  # named (chaos.hostfaults.power_checks.lost_commits)
    commits: int  # counted (chaos.hostfaults.power_checks.commits_lost)


@dataclass
class PowerCuts:
    """The fleet's power hook: cut, restore, and record what each cut took.

    ``server`` is the PostgreSQL server whose data directory is on the image (None on SQLite).
    ``violations``: ``integrity`` after each cut, and ``durable-commits`` where the setting
    promises durability; ``interruptions``: a step per outcome lost (memo row, failure, retry).
    """

    image: PowerImage
    db: str
    setting: Setting
    server: Any = None
    cuts: list[Cut] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    interruptions: Counter = field(default_factory=Counter)
    started: float = field(default_factory=time.monotonic)

    def __call__(self) -> None:
        adapter = resolve(adapter_for(self.db))  # the bench's own door: the reference engine, on this database
        if self.server is not None:
            _wait_for_dead_clients(self.db)
        acknowledged = read_acknowledged(adapter, self.db)
        if self.server is None:
            self.image.cut()
        else:
            pids = _server_pids(self.server.data_dir)  # read before the cut: the files are gone after it
            self.image.cut()
            _kill_all(pids)
        self.image.restore()
        if self.server is not None:
            # The machine rebooted: no process of the old server exists. (Killed, they may stay
            # zombies where the container's init reaps nothing, and the server would take their
            # pid in the lock file for a live postmaster.)
            stale = [os.path.join(self.server.data_dir, "postmaster.pid")]
            stale += [os.path.join(self.server.dir, n) for n in os.listdir(self.server.dir) if n.startswith(".s.PGSQL.")]
            for path in stale:  # the lock files and the socket of the server that died
                if os.path.lexists(path):
                    os.unlink(path)
            self.server.restart()
        survived = adapter.inspect(self.db)
        if adapter.release is not None:
            adapter.release(self.db)
        if self.server is None:
            self.violations += integrity(self.db)
        self.violations += durable_commits("FULL" if self.setting.durable else "NORMAL", acknowledged, survived)
        self.interruptions += lost_interruptions(acknowledged, survived, {w: step for step, (w, _) in adapter.step_states().items()})
        self.cuts.append(Cut(round(time.monotonic() - self.started, 3), lost_commits(acknowledged, survived),
                             commits_lost(acknowledged, survived)))


# The sessions of killed clients: the server still runs what their sockets had delivered (a whole
# BEGIN ... COMMIT may be in the buffer) until it reads the end of the stream.
OTHER_CLIENTS_PG = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
                    "AND backend_type = 'client backend'")


def _wait_for_dead_clients(db: str) -> None:
    """Wait until the server has ended every session of the killed processes: what they had sent
    is then committed or rolled back, and the snapshot of what was acknowledged is final."""
    import psycopg

    deadline = time.monotonic() + SERVER_EXIT_WAIT_S
    with psycopg.connect(db, autocommit=True) as conn:
        while conn.execute(OTHER_CLIENTS_PG).fetchone()[0]:
            if time.monotonic() > deadline:
                raise PowerUnavailable(f"the sessions of the killed processes did not end within {SERVER_EXIT_WAIT_S:.0f} s")
            time.sleep(0.01)


def _server_pids(data_dir: str) -> list[int]:
    """The postmaster (first line of postmaster.pid) and every process it forked."""
    with open(os.path.join(data_dir, "postmaster.pid")) as f:
        postmaster = int(f.readline())
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == postmaster:
                children.append(int(entry))
    return [postmaster, *children]


def _kill_all(pids: list[int]) -> None:
    """SIGKILL every server process and wait until each is gone (they are not our children)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + SERVER_EXIT_WAIT_S
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.01)
    still = [pid for pid in pids if _alive(pid)]
    if still:
        raise PowerUnavailable(f"server processes {still} outlived SIGKILL for {SERVER_EXIT_WAIT_S:.0f} s")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


@dataclass
class PowerRun:
    setting: Setting
    result: TrialResult
    cuts: list[Cut]

    @property
    def figures(self) -> dict[str, Any]:
        """Per setting: acknowledged commits lost per cut, wasted calls, effects re-sent, commit rate."""
        f = self.result.verdict.figures
        n = max(1, len(self.cuts))
        receiver = f["receiver"]
        return {
            "setting": self.setting.label,
            "cuts": len(self.cuts),
            "commits_lost": sum(c.commits for c in self.cuts),
            "commits_lost_per_cut": round(sum(c.commits for c in self.cuts) / n, 2),
            "memo_rows_lost": sum(1 for c in self.cuts for what in c.lost if what.startswith("memo row")),
            "wasted_calls": f["wasted_calls"],
            "paid_calls": f["paid_calls"],
            "effects_resent": receiver["requests"] - receiver["keys"],
            "effects_applied": receiver["applied"],
            "duplicates_applied": receiver["duplicates_applied"],
            "jobs": f["jobs"],
            "settled": sum(n for state, n in f["states"].items() if state in ("delivered", "cancelled", "needs_human")),
            "drained": self.result.run.drained,
            "jobs_per_s": round(self.result.jobs_per_s, 2),
            "invariants_held": not self.result.verdict.violations,
            "violations": [str(v) for v in self.result.verdict.violations[:5]],
            "ok": self.result.ok,
        }


@dataclass
class Powered:
    """A database whose power can be cut: on the image, with the ledgers' directory off it."""

    image: PowerImage
    db: str
    ledgers: str
    setting: Setting
    server: Any = None

    def cuts(self) -> PowerCuts:
        return PowerCuts(self.image, self.db, self.setting, self.server)

    def trial(self, config: FleetConfig, jobs: int, **options: Any) -> Trial:
        """A trial on this database whose submits are on the disk before the first process starts."""
        return _DurablePrepare(config, jobs, power=self.cuts(), image=self.image, **options)


@contextmanager
def powered(setting: Setting, *, directory: str | None = None) -> Iterator[Powered]:
    """An image (and, for PostgreSQL, a durable server on it) for one run; everything is stopped,
    unmounted and detached at the end."""
    reason = power_missing()
    if reason:
        raise PowerUnavailable(reason)
    base = tempfile.mkdtemp(prefix="crashgate-power-", dir=directory)
    os.chmod(base, 0o755)  # a PostgreSQL server runs as its own user, and its directory is under here
    try:
        with PowerImage(base, size_mb=IMAGE_MB) as image:
            server = None
            try:
                if setting.backend == "postgresql":
                    server = _durable_server(image, setting.level)
                    db = server.create_database("power")
                else:
                    db = os.path.join(image.mount, "power.db")
                yield Powered(image, db, os.path.join(base, "ledgers"), setting, server)
            finally:
                if server is not None:
                    server.stop()
                # A reader the judging left to the garbage collector (an adapter's cached
                # inspection connection) still holds a file on the image: close it before unmounting.
                gc.collect()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def power_run(setting: Setting, *, jobs: int, workers: int = BENCH_WORKERS, cut_every_s: float = BENCH_CUT_EVERY_S,
              seed: int = 0, timeout_s: float = 600.0, directory: str | None = None) -> PowerRun:
    """A fleet on ``setting`` with a power cut every ``cut_every_s`` seconds on average, judged."""
    with powered(setting, directory=directory) as p:
        config = FleetConfig(db=p.db, directory=p.ledgers, workers=workers, kill_every_s=0.0, seed=seed, timeout_s=timeout_s,
                             lease_s=BENCH_LEASE_S, synchronous=setting.level if setting.backend == "sqlite" else None,
                             power_every_s=cut_every_s)
        trial = p.trial(config, jobs, drop_every=0, fail_every=0)
        result = trial.run()
    return PowerRun(setting, result, trial.power.cuts)


@dataclass
class _DurablePrepare(Trial):
    """A trial whose submits are on the disk before the first process starts (fsync of the image):
    what a power cut may take is then only what the run itself committed."""

    image: Any = None

    def prepare(self) -> dict[str, str]:
        submitted = super().prepare()
        sync_tree(self.image.mount)
        return submitted


def _durable_server(image: PowerImage, synchronous_commit: str) -> Any:
    from engine.pgserver import ServerUnavailable, TemporaryPostgres

    server = TemporaryPostgres(parent=image.mount, settings=("fsync = on", f"synchronous_commit = {synchronous_commit}",
                                                               "full_page_writes = on"))
    try:
        server.start()
    except ServerUnavailable as exc:
        raise PowerUnavailable(f"cannot start a PostgreSQL server on the image: {exc}") from exc
    try:
        sync_tree(image.mount)  # initdb ran with --no-sync: the cluster itself must be on the disk
    except BaseException:
        server.stop()
        raise
    return server


def commit_rates(backend: str, *, rounds: int = COMMIT_RATE_ROUNDS) -> dict[str, float]:
    """Commits per second of one process at each of ``backend``'s levels, side by side on one image:
    the levels take turns, ``rounds`` times for :data:`COMMIT_RATE_S` each, and each figure is
    the median of its rounds (the fsyncs' cost moves with the host's load, so only figures taken
    in turn compare). SQLite: the engine's submit, one transaction each; PostgreSQL: one INSERT
    per transaction, with ``synchronous_commit`` set per session on one durable server."""
    levels = [s.level for s in SETTINGS.values() if s.backend == backend]
    runs: dict[str, list[float]] = {level: [] for level in levels}
    with tempfile.TemporaryDirectory(prefix="crashgate-rate-") as base:
        os.chmod(base, 0o755)
        with PowerImage(base, size_mb=IMAGE_MB) as image:
            if backend == "sqlite":
                from engine import SqliteStore

                stores = {level: SqliteStore(os.path.join(image.mount, f"rate-{level}.db"), synchronous=level) for level in levels}
                try:
                    for n in range(rounds):
                        for level, store in stores.items():
                            runs[level].append(_rate(lambda i, st=store, r=n: st.submit(f"r{r}-{i}", {"n": i}, now=0.0)))
                finally:
                    for store in stores.values():
                        store.close()
            else:
                import psycopg

                server = _durable_server(image, "on")
                try:
                    with psycopg.connect(server.create_database("rate"), autocommit=True) as conn:
                        conn.execute("CREATE TABLE rate (n int)")
                        for _ in range(rounds):
                            for level in levels:
                                conn.execute(f"SET synchronous_commit = {level}")  # one of our constants
                                runs[level].append(_rate(lambda i: conn.execute("INSERT INTO rate VALUES (%s)", (i,))))
                finally:
                    server.stop()
                    gc.collect()
    return {level: sorted(r)[len(r) // 2] for level, r in runs.items()}


def _rate(commit: Any) -> float:
    started, n = time.perf_counter(), 0
    while time.perf_counter() - started < COMMIT_RATE_S and n < COMMIT_RATE_MAX:
        commit(n)
        n += 1
    return n / (time.perf_counter() - started)


ROW_UNITS = (
    ("commits_lost_per_cut", "commits lost per cut"),
    ("wasted_calls", "wasted calls"),
    ("effects_resent", "effects re-sent"),
    ("commits_per_s", "commits/s"),
)


def power_rows(quick: bool) -> list[dict[str, Any]]:
    """The benchmark's rows: four per setting (see :data:`ROW_UNITS`); skipped with the reason
    where power cuts cannot run (not root, no loop devices) or PostgreSQL is not installed."""
    jobs = BENCH_JOBS_QUICK if quick else BENCH_JOBS
    every = BENCH_CUT_EVERY_S_QUICK if quick else BENCH_CUT_EVERY_S
    rows = []
    rates: dict[str, dict[str, float]] = {}
    for key, setting in SETTINGS.items():
        try:
            if quick and key not in QUICK_SETTINGS:
                raise PowerUnavailable("--quick measures SQLite's NORMAL and FULL only; the full run measures every setting")
            if setting.backend not in rates:
                rates[setting.backend] = commit_rates(setting.backend, rounds=COMMIT_RATE_ROUNDS_QUICK if quick else COMMIT_RATE_ROUNDS)
            run = power_run(setting, jobs=jobs, cut_every_s=every, timeout_s=OFF_TIMEOUT_S if setting.level == "OFF" else 600.0)
        except (PowerUnavailable, ImportError) as exc:
            rows += [{"key": f"power.{key}.{name}", "label": f"power cut, {setting.label}: {unit}", "value": None, "unit": unit,
                      "note": "", "skipped": str(exc)} for name, unit in ROW_UNITS]
            continue
        g = dict(run.figures, commits_per_s=round(rates[setting.backend][setting.level], 1))
        verdict = "held" if g["invariants_held"] else "VIOLATED: " + "; ".join(g["violations"][:2])
        if not run.result.run.drained:
            verdict = f"NOT SETTLED after {run.result.run.seconds:.0f} s ({g['settled']} of {g['jobs']} jobs): each cut rolled back to the last writeback"
        notes = {
            "commits_lost_per_cut": (f"{g['cuts']} cuts, {g['jobs']} jobs, {BENCH_WORKERS} workers + sender; {g['commits_lost']} commits and "
                                     f"{g['memo_rows_lost']} memo rows lost in all; invariants {verdict}"),
            "wasted_calls": f"of {g['paid_calls']} paid calls",
            "effects_resent": f"{g['effects_applied']} applied, {g['duplicates_applied']} twice",
            "commits_per_s": "one process, levels in turn on one image, median of rounds",
        }
        for name, unit in ROW_UNITS:
            rows.append({"key": f"power.{key}.{name}", "label": f"power cut, {setting.label}: {unit}", "value": g[name],
                         "unit": unit, "note": notes[name]})
    return rows
