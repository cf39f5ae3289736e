"""The checks after each fault of the machine, each a named function whose docstring teaches it.

They complement the invariant catalog (which must hold too, once the fault is removed and the
system drained) with what only a fault of the machine can break: the file itself, work already
acknowledged, the worker process, a lease read by a clock that jumped, a damaged row.

>>> sorted(CHECKS)
['acknowledged-kept', 'integrity', 'lease-respected', 'quarantined', 'worker-survives']
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from typing import Any, TYPE_CHECKING

from chaos.core.invariants import Violation, initial_states
from chaos.hostfaults.worker import EXIT_DRAINED, EXIT_STUCK
from chaos.core.store_faults import DAMAGED_STATE, ScenarioDb
from chaos.adapters.postgres import is_postgres
from chaos.core.scenario import EXIT_NOT_REACHED
from chaos.core.settle import RECOVERY_ROUNDS_MAX

if TYPE_CHECKING:
    from chaos.adapter import Adapter

__all__ = ["CHECKS", "acknowledged_kept", "integrity", "lease_respected", "quarantined", "worker_survives"]



def integrity(db: str, schema: Any = None) -> list[Violation]:
    """The fault corrupted nothing: on SQLite, ``PRAGMA integrity_check`` answers ``ok``.

    Protects against a write path that leaves a half-written page behind when a write or an fsync
    fails. Held by SQLite's journal (the WAL): a failed transaction is rolled back as a whole.

    PostgreSQL has no such pragma, and needs none here: its files are written by the server, and
    none of the faults that run on PostgreSQL (lock, clock, damage) touches them, so a page check
    (amcheck) would test the server, not the engine. What replaces it is a consistency query on
    what the engine writes, from the adapter's ``schema`` (without one, none runs): no memo or
    outbox row without its job, no payload row without its job nor a job without its payload row
    (where the payload has a table of its own), and no lease half-written (an owner without an
    expiry, or the reverse). It is weaker than a page check.
    """
    if is_postgres(db):
        queries = schema.consistency_sql() if schema is not None else []
        with ScenarioDb(db) as conn:
            counted = [(what, conn.execute(query).fetchone()[0]) for what, query in queries]
            problems = [f"{count} {what}" for what, count in counted if count]
        return [Violation("integrity", f"consistency query: {'; '.join(problems)}")] if problems else []
    conn = sqlite3.connect(db, timeout=30)
    try:
        result = [r[0] for r in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()
    return [] if result == ["ok"] else [Violation("integrity", f"PRAGMA integrity_check: {'; '.join(result)[:300]}")]


def acknowledged_kept(adapter: Adapter, before: Any, after: Any, state_damaged: str | None = None) -> list[Violation]:
    """Every job the database had acknowledged before the fault is still there, in the same or a
    later state, with every memo row it had.

    Protects against a fault that undoes committed work: a rollback that reaches past the failed
    transaction, a job row lost or sent back to an earlier step. Held by one transaction per
    change and by a failure that rolls back only its own transaction. (A job whose state the
    harness itself damaged is judged by its memo rows only.)
    """
    if before is None:
        return []
    rank = _ranks(adapter)
    out = []
    for job_id, job in sorted(before.jobs.items()):
        now = after.jobs.get(job_id)
        if now is None:
            out.append(Violation("acknowledged-kept", f"job {job_id!r} ({job.state}) was acknowledged before the fault and is gone"))
        elif job_id != state_damaged and rank.get(now.state, 0) < rank.get(job.state, 0):
            out.append(Violation("acknowledged-kept", f"job {job_id!r} went back from {job.state!r} to {now.state!r} after the fault"))
    for key in sorted(set(before.memos) - set(after.memos)):
        out.append(Violation("acknowledged-kept", f"memo row of job {key[0]!r} step {key[1]!r} was committed before the fault and is gone"))
    return out


def _ranks(adapter: Adapter) -> dict[str, int]:
    """How far along the workflow a state is: the number of steps done before it (a job is
    created at 0, and a final state is as far as a job goes)."""
    table = adapter.states()
    steps = list(adapter.step_states().values())
    rank = {state: 0 for state in initial_states(adapter)}
    failed: set[str] = set()
    for index, (working, done) in enumerate(steps):
        rank[working] = index
        rank[done] = index + 1
    for index, (working, _) in enumerate(steps):
        for nxt in table.get(working, ()):
            if nxt not in rank or nxt in failed:  # the failed state (or needs_human) of a step, of the last if shared
                failed.add(nxt)
                rank[nxt] = index
    for final in adapter.final_effects():
        rank[final] = max(rank.get(final, 0), len(steps))
    return rank


def worker_survives(status: int, died_of: str | None, restart: Callable[[], str | None]) -> list[Violation]:
    """The worker process lived through the fault and drained the database once it was removed;
    if it died, a restarted worker must do it without a human.

    Protects against a loop that dies on the first database error (and takes every job it would
    have processed with it) and against one that survives but never works again (a lock read as
    "no work", forever). Held by reporting a failed transaction as ``unavailable`` or ``busy`` and
    backing off, never raising out of the loop. ``status`` is the worker's wait status;
    ``restart`` drains with a fresh worker and says what went wrong, if anything.
    """
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) in (EXIT_DRAINED, EXIT_NOT_REACHED):
        return []
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_STUCK:
        problem = (
            f"the worker process survived but did not resume: after the fault was removed it ran {RECOVERY_ROUNDS_MAX} "
            "rounds, time passing every lease and backoff, and left jobs unsettled"
        )
    else:
        died = died_of or (f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"wait status {status}")
        problem = f"the worker process died: {died}"
    out = [Violation("worker-survives", problem)]
    failure = restart()
    if failure:
        out.append(Violation("worker-survives", failure))
    return out


def lease_respected(valid: dict[str, tuple[Any, float, str]], after: dict[str, tuple[Any, float, str]]) -> list[Violation]:
    """No job is claimed while its lease is valid by the clock of the worker that claims it.

    Protects against a claim that decides a lease expired by a clock that moved backwards, or by
    anything but ``lease_until <= now``. Held by a claim whose only test is that one, on the
    claimer's own clock: a clock behind makes leases last longer, never shorter. ``valid`` and
    ``after`` map each leased job to (token, lease_until, owner) before and after the claims (the
    token None where the engine has none: a claim is then a new owner).
    """
    out = []
    for job_id, (token, until, owner) in sorted(valid.items()):
        now = after.get(job_id)
        if now is None or (now[0], now[2]) != (token, owner):
            out.append(Violation(
                "lease-respected",
                f"job {job_id!r} was taken from {owner!r} while its lease (until {until:.0f}) was valid by the claimer's clock",
            ))
    return out


def quarantined(snapshot: Any, job_id: str, what: str, settled: frozenset[str], *, state_damaged: bool,
                parked: frozenset[str] | None = None) -> tuple[bool, list[Violation]]:
    """A job whose row was damaged and read again ends parked (a settled state that is not
    final), with a ``last_error`` saying why: it is quarantined, not crashed on, and not retried.

    Protects against a loop that crashes on a row it cannot parse (and so stops for every job),
    and against one that retries it forever. Held by parsing every stored row where it is read and
    parking the job on :class:`engine.DamagedRow` (the reference's ``last_error`` starts with
    ``quarantined:``). ``snapshot`` is the adapter's view after the worker ran on; ``parked``
    defaults to every settled state. Returns (whether the damage was read, violations).
    """
    job = snapshot.jobs.get(job_id)
    if job is None:
        return False, []  # acknowledged-kept reports a lost row
    state, error = job.state, job.last_error
    if error and error.startswith("quarantined:"):  # the reference's word for it: the damage was read
        return True, []
    if state_damaged and state in (settled if parked is None else parked) and state != DAMAGED_STATE and error:
        return True, []  # parked, saying why: read as the engine's own quarantine
    if state in settled and state != DAMAGED_STATE and not state_damaged:
        return False, []  # finished before the damage was read again
    return True, [Violation("quarantined", f"job {job_id!r}, whose {what} was damaged, ended in {state!r} with last_error {error!r}")]


CHECKS: dict[str, Callable[..., Any]] = {
    "integrity": integrity,
    "acknowledged-kept": acknowledged_kept,
    "worker-survives": worker_survives,
    "lease-respected": lease_respected,
    "quarantined": quarantined,
}
