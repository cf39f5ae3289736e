"""One trial: a fresh database, N documents, a fleet under the chaos monkey, and the verdict.

What the demo and the soak share. The harness installs its audit triggers before any worker
starts (so the whole history is recorded), submits the documents, starts the loopback receiver,
runs the fleet until every job is settled and every outbox row sent, and then judges the history.

>>> document_ids(3)
['doc-00001', 'doc-00002', 'doc-00003']
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from engine import PostgresStore, StoreFailed, format_status, status

from chaos.fleet.fleet import Fleet, FleetConfig, FleetRun, Progress
from chaos.adapters.postgres import adapter_for, connect_retrying, is_postgres
from chaos.fleet.receiver import DROP_EVERY_DEFAULT, FAIL_EVERY_DEFAULT, ReceiverNotStarted, ReceiverProcess
from chaos.fleet.verdict import Verdict, judge, payload_json

__all__ = ["Trial", "TrialResult", "document_ids", "NotEmpty", "CannotPrepare"]

SUBMIT_CHUNK = 5_000  # documents per submit transaction


class NotEmpty(ValueError):
    """The database already holds jobs: a trial's history must start empty."""


class CannotPrepare(RuntimeError):
    """The trial's database, ledgers or receiver could not be made (a full disk, a read-only one).

    No worker ran, and what the trial made for itself (its database file, its ledgers' folder) is
    removed: left there, they made the same command refuse to run again once the disk had room.
    """


def document_ids(count: int) -> list[str]:
    return [f"doc-{n:05d}" for n in range(1, count + 1)]


@dataclass
class TrialResult:
    config: FleetConfig
    run: FleetRun
    verdict: Verdict
    status_text: str
    status: dict[str, Any]
    documents: dict[str, int] = field(default_factory=dict)
    settle_s: float = 0.0  # from the first process's start to the last job's last state change

    @property
    def jobs_per_s(self) -> float:
        return self.verdict.figures["jobs"] / max(self.settle_s, 1e-9)

    @property
    def ok(self) -> bool:
        return (self.verdict.held and self.verdict.harness_ok and self.run.drained and not self.run.unexpected_exits
                and self.kills_ok)

    @property
    def kills_ok(self) -> bool:
        return len(self.run.kills) >= self.config.kills_min


@dataclass
class Trial:
    """``Trial(config, jobs).run()``; the receiver's behaviour is a parameter (tests plant bugs)."""

    config: FleetConfig
    jobs: int
    receiver_dedupes: bool = True
    drop_every: int = DROP_EVERY_DEFAULT
    fail_every: int = FAIL_EVERY_DEFAULT
    # Power cuts (chaos.hostfaults.power_runs.PowerCuts): called by the fleet every config.power_every_s;
    # what they took counts as interruptions, and what they must not take as violations.
    power: Any = None

    def prepare(self) -> dict[str, str]:
        """Create the schema and the audit triggers, then submit the documents; returns them."""
        if self.jobs < 1:
            raise ValueError(f"jobs={self.jobs} must be >= 1")
        os.makedirs(self.config.log_dir, exist_ok=True)
        adapter = adapter_for(self.config.db)
        adapter.create(self.config.db)
        store = adapter.make_store(self.config.db)
        try:
            existing = len(store.jobs())
            if existing:
                raise NotEmpty(
                    f"database {PostgresStore.redacted(self.config.db)!r} already holds {existing} jobs; a trial judges the whole history, "
                    "so it needs a new database: pass another --db or remove this one"
                )
            submitted: dict[str, str] = {}
            ids = document_ids(self.jobs)
            for start in range(0, len(ids), SUBMIT_CHUNK):
                chunk = [(job_id, {"source": job_id}) for job_id in ids[start:start + SUBMIT_CHUNK]]
                store.submit_many(chunk, now=time.time())
                submitted.update((job_id, payload_json(payload)) for job_id, payload in chunk)
        finally:
            store.close()
        return submitted

    def run(self, on_progress: Callable[[Progress, FleetRun], None] | None = None) -> TrialResult:
        made = _new_paths(self.config)
        try:
            submitted = self.prepare()
            receiver = ReceiverProcess.start(
                self.config.receiver_path, dedupe=self.receiver_dedupes, drop_every=self.drop_every,
                fail_every=self.fail_every, log_path=os.path.join(self.config.log_dir, "receiver.log"),
            )
        except (OSError, StoreFailed, ReceiverNotStarted) as exc:
            _remove(made)
            raise CannotPrepare(_unprepared(self.config, exc)) from None
        adapter = adapter_for(self.config.db)
        try:
            fleet = Fleet(self.config, receiver, adapter.settled_states(), power=self.power)
            run = fleet.run(self.jobs, on_progress)
            documents = receiver.stats()
        finally:
            receiver.stop()
        _wait_for_database(self.config.db)
        verdict = judge(adapter, self.config.db, calls_path=self.config.calls_path, receiver_path=self.config.receiver_path,
                        submitted=submitted, killed=run.killed_ids, seed=self.config.seed,
                        lost=None if self.power is None else self.power.interruptions)
        if self.power is not None:
            verdict.violations += self.power.violations
        store = adapter.make_store(self.config.db)
        try:
            report = status(store, now=time.time(), settled_states=adapter.settled_states())
            settle_s = max(job.updated for job in store.jobs()) - run.started_at
        finally:
            store.close()
        return TrialResult(self.config, run, verdict, format_status(report), report, documents, settle_s)


def _wait_for_database(db: str) -> None:
    """Wait for a PostgreSQL server that a fault left restarting or recovering: the verdict reads
    the history from it, and a server still starting up is a moment to wait, not a traceback."""
    if is_postgres(db):
        connect_retrying(db).close()


SQLITE_FILES = ("", "-wal", "-shm", "-journal")


def _new_paths(config: FleetConfig) -> list[str]:
    """What a trial is about to make and may remove if it cannot start: the ledgers' folder and
    the SQLite files, each only if it does not exist yet (a PostgreSQL database is never removed)."""
    paths = [config.directory]
    if not is_postgres(config.db):
        paths += [config.db + suffix for suffix in SQLITE_FILES]
    return [path for path in paths if not os.path.lexists(path)]


def _remove(paths: list[str]) -> None:
    for path in paths:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.remove(path)
            except OSError:  # gone already, or not removable: the reason that stopped the trial is what to say
                pass


def _unprepared(config: FleetConfig, exc: BaseException) -> str:
    """One line: what could not be made, what the system said, and the fix."""
    if isinstance(exc, StoreFailed):
        reason = f"database {config.db}: {exc.__cause__ or exc}"
    elif isinstance(exc, OSError) and exc.filename:
        reason = f"{exc.filename}: {exc.strerror or exc}"
    else:
        reason = str(exc)
    folder = os.path.dirname(os.path.abspath(config.directory))
    try:
        free = f" ({shutil.disk_usage(folder).free // 1024:,} KiB free)"
    except OSError:
        free = ""
    return (f"cannot start: {reason}; no worker ran, and what this run made is removed; "
            f"free disk space in {folder}{free} or put the database on another disk")
