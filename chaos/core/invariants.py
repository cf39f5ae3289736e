"""The invariant catalog: each a named function whose docstring says what it protects against.

Every check reads only what outlives a worker: the engine's database (through the adapter's
:class:`~chaos.adapters.reference.Snapshot`, with state changes recorded by the harness's audit trigger) and
the world's ledger. None trusts the worker's own memory. What they read and report is in
:mod:`chaos.core.evidence`, the checks of a run (rather than of a snapshot) in
:mod:`chaos.core.run_checks`, the fix of each finding in :mod:`chaos.core.fixes`; this module's
``__all__`` names theirs too, so that the catalog is used from one import.

>>> sorted(INVARIANTS)[:3]
['bounded-spend', 'cost-recorded', 'drains']
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Callable

from chaos.core.world import Call
from chaos.core.evidence import Evidence, Violation, initial_states, submit_policy
from chaos.core.fixes import CAUSE_FIXES, FIXES
from chaos.core.run_checks import HARNESS_CHECKS, baseline_failures, hangs, idempotent_submit, point_reached, raised, same_outcome, short

__all__ = [
    "Evidence",
    "FIXES",
    "CAUSE_FIXES",
    "initial_states",
    "submit_policy",
    "Violation",
    "INVARIANTS",
    "ALWAYS",
    "AT_REST",
    "check",
    "wasted_calls",
    "zombie_calls",
    "same_outcome",
    "baseline_failures",
    "raised",
    "point_reached",
    "hangs",
    "HARNESS_CHECKS",
    "describe",
    "idempotent_submit",
    "retry_spread",
    "busiest_window",
    "HERD_MIN",
]

# Transient faults: after each, one more paid call for the same step is expected, not wasteful.
# Poison faults (bad_request, parse) earn no retry: nothing will differ next time. A store fault
# (a write lock held elsewhere, a full disk: chaos.core.world.STORE_FAULT_KINDS) takes the commit
# after the call it came with, so that call is paid for once more too; so does a call that stalled
# past its lease (the job was taken over meanwhile), and one that hung until the step's timeout.
INTERRUPTING_FAULTS = frozenset({"timeout", "connection", "rate_limit", "server_error", "lock_held", "disk_full", "io_error", "io_read_error", "stall",
                                 "hang"})
# The faults an engine retries on its own schedule. A 429 is left out of the retry storm: its
# Retry-After is the server's own answer to when everyone may come back.
STORM_FAULT_KINDS = frozenset({"timeout", "connection", "server_error"})
# A retry counts for retry-spread once its (job, step) failed this many times in a row: full
# jitter draws its delay from a window at least 2**3 - 1 = 7 s wide.
FAILURES_IN_A_ROW_MIN = 3
HERD_MIN = 12  # fewer such retries are not a herd: retry-spread holds vacuously
SPREAD_WINDOW_S = 1.0


def legal_transitions(ev: Evidence) -> list[Violation]:
    """Every recorded state change is an edge of the table; every state is known; no job row is
    lost or duplicated.

    Protects against a transition written without checking the table, or a write that lands on a
    job another worker already moved. Held by the state table as data, checked before each
    UPDATE, and by compare-and-swap (``WHERE state = :from``) so a stale writer changes nothing.
    """
    out: list[Violation] = []
    damaged = ev.snapshot.damaged
    # Where a job whose state the harness damaged may go: a parked state of the table (with or
    # without a way out), never a final one (a job no step can place is not finished).
    parked = {s for s in ev.settled_states - set(ev.final_effects) if s in ev.table}
    for job_id, before, after in ev.snapshot.transitions:
        if before is not None and before == damaged.get(job_id) and after in parked:
            continue  # the quarantine, into a parked state, of a state the harness wrote itself
        if after is None:
            out.append(Violation("legal-transitions", f"job {job_id!r} row was deleted (last state {before!r})"))
        elif before is None:
            if after not in ev.initial_states:
                first = ", ".join(repr(s) for s in sorted(ev.initial_states))
                out.append(Violation("legal-transitions", f"job {job_id!r} was created in state {after!r}, not {first}"))
        elif before not in ev.table or after not in ev.table:
            unknown = before if before not in ev.table else after
            out.append(Violation("legal-transitions", f"job {job_id!r}: state {unknown!r} is not in the table"))
        elif after not in ev.table[before]:
            out.append(
                Violation("legal-transitions", f"job {job_id!r} moved {before!r} -> {after!r}, which is not an edge of the table")
            )
    for job_id in ev.submitted:
        if job_id not in ev.snapshot.jobs:
            out.append(Violation("legal-transitions", f"job {job_id!r} was acknowledged at submit but its row is gone"))
    for job_id in ev.snapshot.jobs:
        if ev.submitted and job_id not in ev.submitted:
            out.append(Violation("legal-transitions", f"job {job_id!r} exists but was never submitted"))
    return out


def no_spend_after_memo(ev: Evidence) -> list[Violation]:
    """No paid call for (job, step) starts after that step's memo row was committed, by a worker
    that holds a valid lease at the time of the call.

    Protects against paying twice for a result you already have: a resumed job that re-runs a
    step instead of reading its memo. Held by looking up ``step_result`` before running a step.
    A paused zombie whose lease already expired can waste one call per pause: that is reported as
    waste (see :func:`zombie_calls`), not a violation.
    """
    return [
        Violation(
            "no-spend-after-memo",
            f"worker {c.worker!r} paid for {c.task!r} of job {c.job_id!r} (step {c.step!r}) after that step's memo "
            f"was committed, while holding a valid lease{f' (paid from {c.origin})' if c.origin else ''}",
        )
        for c in ev.calls
        if c.memo_committed and c.lease_valid
    ]


def bounded_spend(ev: Evidence) -> list[Violation]:
    """Paid calls for (job, step) <= 1 + interruptions of that step (crashes, faults, pauses
    longer than the lease).

    Protects against a step that runs twice without anything going wrong: a second worker taking
    over a job whose lease lapsed during a long call (no heartbeat), or a retry of a poison
    failure. Held by heartbeats, leases, fencing and the poison rule; the surplus within the bound
    is reported as wasted spend. A transient send fault met inside a step that sends its effect
    itself (declared in the adapter's ``sends_from_steps``) is a fault of that step too: its retry
    pays for the step's call again.
    """
    calls = Counter((c.job_id, c.step) for c in ev.calls)
    faulted = Counter((c.job_id, c.step) for c in ev.calls if c.fault in INTERRUPTING_FAULTS)
    faulted.update((job, step) for job, step, kind in ev.step_send_faults if kind in INTERRUPTING_FAULTS)
    paid_from = {(c.job_id, c.step): c.origin for c in ev.calls if c.origin}
    out = []
    for key, count in sorted(calls.items()):
        allowed = 1 + ev.interruptions.get(key, 0) + faulted.get(key, 0)
        if count > allowed:
            where = f", paid from {paid_from[key]}" if key in paid_from else ""
            out.append(
                Violation(
                    "bounded-spend",
                    f"job {key[0]!r} step {key[1]!r}: {count} paid calls, at most {allowed} allowed "
                    f"({ev.interruptions.get(key, 0)} interruption(s), {faulted.get(key, 0)} faulted call(s){where})",
                )
            )
    return out


def memo_stable(ev: Evidence) -> list[Violation]:
    """A step_result row, once written, never changes.

    Protects the memo's meaning: it is the proof that a step was paid for and what it returned,
    the cost report, and the input of every later step. Held by inserting memo rows (never
    upserting) inside the completion transaction.
    """
    out = [
        Violation("memo-stable", f"memo of job {job!r} step {step!r} was {what}")
        for job, step, what in ev.snapshot.memo_changes
    ]
    if ev.previous_memos is not None:
        for key, output in ev.previous_memos.items():
            now = ev.snapshot.memos.get(key)
            if now is None:
                out.append(Violation("memo-stable", f"memo of job {key[0]!r} step {key[1]!r} disappeared"))
            elif now != output:
                out.append(Violation("memo-stable", f"memo of job {key[0]!r} step {key[1]!r} changed"))
    return out


def cost_recorded(ev: Evidence) -> list[Violation]:
    """Every memo row's cost is a finite amount of money, zero or more.

    The memo is the cost report ("which step costs the money" is one query over it): a price the
    engine stored as the paid service answered it, unchecked, turns that report into nonsense for
    good (a negative refund, a text, an infinity that every sum carries on), and no retry mends a
    row that is never written again. Held by checking a step's cost before its completion is
    committed, and failing the step instead (the reference engine refuses it as poison). An
    engine that records no cost (the adapter's memo table declares no cost column) is not checked.
    """
    return [
        Violation("cost-recorded", f"memo of job {job!r} step {step!r} records a cost of {short(cost)}, not a finite amount >= 0")
        for (job, step), cost in sorted(ev.snapshot.memo_costs.items(), key=lambda item: item[0])
        if not _an_amount(cost)
    ]


def _an_amount(cost: Any) -> bool:
    return isinstance(cost, (int, float)) and not isinstance(cost, bool) and math.isfinite(cost) and cost >= 0


def progress_recorded(ev: Evidence) -> list[Violation]:
    """A job never runs ahead of its memo: every step whose done state the job has passed has its
    step_result row.

    Protects against advancing the state in one transaction and writing the result in another: a
    crash between them leaves a job that claims a step is done with no result to show for it.
    Held by committing the memo and the state advance in ONE transaction.
    """
    done_of = {done: step for step, (_, done) in ev.step_states.items()}
    passed: set[tuple[str, str]] = set()
    for job_id, _, after in ev.snapshot.transitions:
        if after in done_of:
            passed.add((job_id, done_of[after]))
    return [
        Violation("progress-recorded", f"job {job!r} reached {ev.step_states[step][1]!r} but step {step!r} has no memo row")
        for job, step in sorted(passed)
        if (job, step) not in ev.snapshot.memos
    ]


def effects_complete(ev: Evidence) -> list[Violation]:
    """Every job that reached its final state has each effect its workflow declares applied
    exactly once at the receiver.

    Protects against losing an effect (an email never sent because the worker died after the
    commit) or applying it twice. Held by the outbox (the effect is committed with the step) plus
    a receiver that dedupes on the idempotency key.
    """
    applied = Counter(d.key for d in ev.deliveries if d.applied)
    out = []
    for job_id, job in sorted(ev.snapshot.jobs.items()):
        for kind in ev.final_effects.get(job.state, ()):
            count = applied.get(f"{job_id}:{kind}", 0)
            if count != 1:
                out.append(Violation("effects-complete", f"job {job_id!r} is {job.state!r} but effect {kind!r} was applied {count} times"))
    return out


def effects_through_outbox(ev: Evidence) -> list[Violation]:
    """Every effect a step has on the world goes through the outbox: no step writes a file
    outside the engine's storage, connects a socket, sends a datagram or starts a process.

    Protects against the effect the world's receiver never sees: an email sent through the
    team's own client (an SMTP library, an HTTP POST, a line appended to a mail spool) is sent
    again each time a crash makes its step run again, and sent for a result the engine may never
    commit. Held by returning the effect from the step (``StepOutput(effects=...)``, declared on
    the Step) so that it commits with the step and the outbox sender delivers it with an
    idempotency key. Seen in a scenario's workers by Python's audit hooks (:mod:`chaos.core.effects`);
    what is not an effect (a cache folder, a read-only service) is declared, with
    ``--chaos-allow-effects`` or the adapter's ``allowed_effects``.
    """
    return [
        Violation("effects-through-outbox", f"a step {what}, done from {where}, outside the outbox "
                                            f"(worker processes that did it: {times})")
        for what, where, times in ev.escapes
    ]


def outbox_at_least_once(ev: Evidence, *, at_rest: bool = True) -> list[Violation]:
    """Every committed outbox row is delivered at least once; the receiver applies exactly one
    effect per key; no effect arrives without a committed outbox row; ``sent_at`` set implies
    delivered.

    Protects against the three outbox mistakes: sending from inside the step (an effect for a
    result that was never committed), marking before sending (a crash loses the effect), and a
    receiver without dedupe (a re-send applies twice). At-least-once is the best a sender can do;
    the idempotency key makes it effectively once. An engine that promises exactly-once effects
    declares ``receiver = "strict"`` (the world's receiver then applies every delivery) and is held
    to it: an effect applied twice is named with its job and the line that sent it.
    ``at_rest=False`` skips "every row delivered", which only holds once the sender has had its
    chance.
    """
    out = []
    outbox_keys = {row.key for row in ev.snapshot.outbox}
    delivered = {d.key for d in ev.deliveries}
    applied = Counter(d.key for d in ev.deliveries if d.applied)
    sent_from = {d.key: d.origin for d in ev.deliveries if d.origin}
    for key in sorted(delivered - outbox_keys):
        where = f" (sent from {sent_from[key]})" if key in sent_from else ""
        out.append(Violation("outbox-at-least-once", f"effect {key!r} arrived at the receiver without a committed outbox row{where}"))
    job_of = {row.key: row.job_id for row in ev.snapshot.outbox}
    for key, count in sorted(applied.items()):
        if count > 1:
            lines = sorted({d.origin for d in ev.deliveries if d.applied and d.key == key})
            sent = ", ".join(line or "the engine's outbox sender" for line in lines)
            job = f"job {job_of[key]!r}, " if key in job_of else ""
            out.append(Violation("outbox-at-least-once", f"effect {key!r} was applied {count} times at the receiver "
                                                         f"({job}sent from {sent})"))
    for row in ev.snapshot.outbox:
        if row.sent_at is not None and row.key not in delivered:
            out.append(Violation("outbox-at-least-once", f"outbox row {row.key!r} is marked sent but was never delivered"))
        elif at_rest and row.key not in delivered:
            out.append(Violation("outbox-at-least-once", f"outbox row {row.key!r} was committed but never delivered"))
    return out


def drains(ev: Evidence) -> list[Violation]:
    """Once faults stop and time passes every lease and backoff, every job ends settled
    (delivered, cancelled, needs_human or a failed state), with no lease held and no unsent
    outbox row.

    Protects against a job stuck forever: a lease never released, a backoff never due, a row the
    sender never picks up. Held by leases that expire, claims that take expired leases over, and a
    sender that retries.
    """
    out = []
    for job_id, job in sorted(ev.snapshot.jobs.items()):
        if job.state not in ev.settled_states:
            out.append(Violation("drains", f"job {job_id!r} is still {job.state!r} after the system drained"))
        if job.lease_owner is not None:
            out.append(Violation("drains", f"job {job_id!r} ({job.state}) still has a lease held by {job.lease_owner!r}"))
    for row in ev.snapshot.outbox:
        if row.sent_at is None:
            out.append(Violation("drains", f"outbox row {row.key!r} is still unsent after the system drained"))
    return out


def fenced_writes(ev: Evidence) -> list[Violation]:
    """A worker never writes to a job (a state change, a memo row, an outbox row) after another
    worker took the job over.

    Protects against the zombie: a worker frozen past its lease (a GC pause, a VM migration) that
    wakes up and commits as if nothing happened, on top of the work of the worker that replaced
    it. Held by the fencing token every claim hands out and every later write is guarded by.
    Only pauses reveal its absence; it needs the harness's writer attribution (scenario
    databases), and holds vacuously where there is none.
    """
    out: list[Violation] = []
    holder: dict[str, str] = {}
    for job_id, kind, writer, detail in ev.snapshot.writes:
        if kind == "claim":
            holder[job_id] = writer
        elif writer != "human" and job_id in holder and writer != holder[job_id]:
            out.append(
                Violation(
                    "fenced-writes",
                    f"worker {writer!r} wrote {kind} {detail!r} to job {job_id!r} after {holder[job_id]!r} had taken it over",
                )
            )
    return out


def retry_spread(ev: Evidence) -> list[Violation]:
    """After an outage, the jobs it hit come back spread out: when at least :data:`HERD_MIN`
    paid calls each follow three or more retryable failures in a row of their step (timeouts,
    connection errors, 5xx), no one-second window of the clock holds more than three quarters
    of them.

    Protects against the thundering herd: every job that failed during an outage retries at the
    same instant when it ends, and the recovery becomes the second outage. Held by full-jitter
    backoff (``engine/_retry.py``): the delay before the retry that follows k failures in a row
    is drawn from ``uniform(1, min(32, 2**k))`` seconds. From k = 3 on that window is at least
    7 s wide, so any one-second window catches each such retry with a chance of at most 1/7:
    about m/7 of m retries on average. Three quarters is more than five times that: of 200,000
    simulated storms of 16 such retries, the busiest second held at most 11 (13 would break the
    bound), while a backoff without jitter (``base * 2**k``) puts all of them in the same instant. Only the
    retries after the third failure count, because the first two windows (1-2 s, 1-4 s) are too
    narrow for any jitter to spread a herd across seconds. A 429 is not counted: its Retry-After
    names the time. Holds vacuously where there is no storm, and needs a clock that moves to
    each retry as it falls due (a paced drain, or a worker polling), not past all of them at once.
    """
    in_a_row: Counter = Counter()
    times: list[float] = []
    for call in sorted(ev.calls, key=lambda c: c.seq):
        key = (call.job_id, call.step)
        if in_a_row[key] >= FAILURES_IN_A_ROW_MIN:
            times.append(call.at)
        in_a_row[key] = in_a_row[key] + 1 if call.fault in STORM_FAULT_KINDS else 0
    if len(times) < HERD_MIN:
        return []
    allowed = len(times) * 3 // 4
    worst, start = busiest_window(sorted(times), SPREAD_WINDOW_S)
    if worst <= allowed:
        return []
    return [Violation(
        "retry-spread",
        f"{worst} of {len(times)} retries after three failures in a row fell within {SPREAD_WINDOW_S:g}s (from t={start:.3f}); "
        f"at most {allowed} allowed: back off with full jitter, a random delay in [1, 2**attempt] seconds",
    )]


def busiest_window(times: list[float], window_s: float) -> tuple[int, float]:
    """The most of the sorted ``times`` within any window of ``window_s`` seconds, and the first
    time in that window.

    >>> busiest_window([0.0, 0.5, 0.9, 2.0], 1.0)
    (3, 0.0)
    """
    worst, at, first = 0, 0.0, 0
    for last, t in enumerate(times):
        while times[first] <= t - window_s:
            first += 1
        if last - first + 1 > worst:
            worst, at = last - first + 1, times[first]
    return worst, at


def _outbox_now(ev: Evidence) -> list[Violation]:
    return outbox_at_least_once(ev, at_rest=False)

# Checked at every observable moment (right after a kill, after every state-machine rule).
ALWAYS: dict[str, Callable[[Evidence], list[Violation]]] = {
    "legal-transitions": legal_transitions,
    "no-spend-after-memo": no_spend_after_memo,
    "bounded-spend": bounded_spend,
    "memo-stable": memo_stable,
    "cost-recorded": cost_recorded,
    "progress-recorded": progress_recorded,
    "outbox-at-least-once": _outbox_now,
    "fenced-writes": fenced_writes,
    "effects-through-outbox": effects_through_outbox,
}
# Checked once the system is at rest (faults stopped, time advanced, everything drained).
AT_REST: dict[str, Callable[[Evidence], list[Violation]]] = {
    **ALWAYS,
    "effects-complete": effects_complete,
    "outbox-at-least-once": outbox_at_least_once,
    "drains": drains,
    "retry-spread": retry_spread,
}


INVARIANTS: dict[str, Callable[..., list[Violation]]] = {
    **AT_REST, "idempotent-submit": idempotent_submit, "same-outcome": same_outcome, "hangs": hangs,
}


def check(ev: Evidence, *, at_rest: bool) -> list[Violation]:
    """Run the catalog (the at-rest catalog if ``at_rest``) and return every violation."""
    out: list[Violation] = []
    for fn in (AT_REST if at_rest else ALWAYS).values():
        out.extend(fn(ev))
    return out


def wasted_calls(ev: Evidence) -> int:
    """Paid calls whose result was not memoised: the price of crashes, faults and retries."""
    memoised = {key for key in ev.snapshot.memos}
    per_step = Counter((c.job_id, c.step) for c in ev.calls)
    return sum(count - (1 if key in memoised else 0) for key, count in per_step.items())


def zombie_calls(ev: Evidence) -> list[Call]:
    """Calls made by a worker whose lease had expired after the memo was committed: waste, reported."""
    return [c for c in ev.calls if c.memo_committed and not c.lease_valid]


def describe(fn: Any) -> str:
    """The first paragraph of an invariant's docstring: what it holds."""
    return " ".join((fn.__doc__ or "").strip().split("\n\n")[0].split())
