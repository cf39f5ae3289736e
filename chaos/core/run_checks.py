"""The checks of a run rather than of a snapshot: a submit repeated on every known id
(``idempotent-submit``), a drained run compared with the same run without any fault
(``same-outcome``, and the baseline that must itself end as expected), and the verdicts the
harness gives a scenario that raised, never reached its point, or hung.

>>> raised("the worker", "KeyError: 'order-1'")
Violation(invariant='raised', detail="the worker raised KeyError: 'order-1'")
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, TYPE_CHECKING

from chaos.adapter import Snapshot
from chaos.core.evidence import Violation

if TYPE_CHECKING:
    from chaos.core.target import Target

__all__ = [
    "idempotent_submit", "same_outcome", "baseline_failures", "raised", "point_reached", "hangs", "short", "HARNESS_CHECKS"
]


def idempotent_submit(session: Any, inspect: Callable[[], Snapshot], submitted: dict[str, str],
                      conflict_errors: tuple[type[BaseException], ...], policy: str = "raises") -> list[Violation]:
    """Submitting an id that exists creates nothing new (same payload) or is refused (different
    payload).

    Protects against duplicated work when an upstream caller retries a submit it believes failed.
    Held by using the caller's job id as the idempotency key. This check is active: it submits
    every known id again, once with the same payload and once with a different one, and compares
    the database before and after. ``policy`` is the engine's answer to a different payload:
    ``"raises"`` (one of ``conflict_errors``) or ``"first-wins"`` (accepted, and nothing changes).
    """
    import json

    out: list[Violation] = []
    if not submitted:
        return out
    before = inspect()
    for job_id, payload_json in sorted(submitted.items()):
        session.submit(job_id, json.loads(payload_json))
        if policy == "first-wins":
            session.submit(job_id, {"conflicting": payload_json})  # must change nothing: compared below
            continue
        try:
            session.submit(job_id, {"conflicting": payload_json})
        except conflict_errors:
            pass
        else:
            out.append(Violation("idempotent-submit", f"re-submitting {job_id!r} with a different payload was accepted"))
    after = inspect()
    if after.jobs != before.jobs:
        changed = sorted(j for j in set(before.jobs) | set(after.jobs) if before.jobs.get(j) != after.jobs.get(j))
        out.append(Violation("idempotent-submit", f"re-submitting existing ids changed jobs: {', '.join(changed)}"))
    return out


def same_outcome(baseline: Any, outcome: Any, allowed: tuple[str, ...] = ()) -> list[Violation]:
    """Once the system drains after a fault, every job ends in the state, with the result and the
    applied effects, that the same scenario reached without any fault: a crash is invisible in
    the outcome, only in the cost.

    Protects against everything a crash changes that the other checks count as fine because a
    failed state is settled: state kept in process memory between steps (the recovering process
    never had it), a step that behaves differently on its second attempt, a memo row that does
    not hold everything the next step needs. Held by steps whose only input is the job's payload
    and the memo rows of the steps before, and whose only output is their own memo row and
    outbox rows. A family whose point is a race names in ``allowed`` the other final states it
    may reach (a killed cancel is a cancel that never happened).
    """
    out: list[Violation] = []
    raced = False
    for job_id, state in sorted(outcome.final_states.items()):
        expected = baseline.final_states.get(job_id)
        if expected is None or state == expected:
            if expected is not None and outcome.results.get(job_id) != baseline.results.get(job_id):
                out.append(Violation("same-outcome", f"job {job_id!r} ended {state!r} as without any fault, but with the result "
                                     f"{short(outcome.results.get(job_id))} instead of {short(baseline.results.get(job_id))}"))
            continue
        if state in allowed:
            raced = True
            continue
        error = outcome.last_errors.get(job_id)
        why = f" (last_error: {short(error)}{_raised_at(error, getattr(outcome, 'raised', {}))})" if error else ""
        out.append(Violation("same-outcome", f"job {job_id!r} ended {state!r}{why} after the fault; without any fault it ends {expected!r}"))
    if not raced and outcome.effects != baseline.effects:
        missing = sorted(set(baseline.effects) - set(outcome.effects))
        extra = sorted(set(outcome.effects) - set(baseline.effects))
        changed = sorted(k for k in set(baseline.effects) & set(outcome.effects) if baseline.effects[k] != outcome.effects[k])
        parts = [f"{label} {', '.join(map(repr, keys))}" for label, keys in
                 (("missing", missing), ("not applied without a fault", extra), ("applied with another payload", changed)) if keys]
        if changed:  # what differs, so that the step that computes it can be found
            parts.append(f"{changed[0]!r}: {_payload_difference(outcome.effects[changed[0]], baseline.effects[changed[0]])}")
        out.append(Violation("same-outcome", "the effects applied differ from those without any fault: " + "; ".join(parts)))
    return out


def _raised_at(error: str, raised: Mapping[str, str]) -> str:
    """Where the user's code raised the exception ``error`` (a ``last_error``) names, said as
    ``, raised from path:line``; that no user's line did, where none matches.

    >>> _raised_at("charge: KeyError: 'order-1'", {"KeyError: 'order-1'": "orders.py:14"})
    ', raised from orders.py:14'
    """
    return _raised_from(error, raised) or "; no line of the workflow's own code raised it"


def _raised_from(error: str, raised: Mapping[str, str]) -> str:
    """``, raised from path:line`` where the user's code raised the exception ``error`` names, else "".

    >>> _raised_from("charge: KeyError: 'amount'", {"KeyError: 'amount'": "shop/flow.py:13"})
    ', raised from shop/flow.py:13'
    """
    matches = [where for text, where in raised.items() if text and text in error]
    return f", raised from {matches[0]}" if matches else ""


def _payload_difference(after: str, alone: str) -> str:
    """How an effect's payload (JSON text) after a fault differs from the one applied without any:
    the top-level fields that differ, each ``now`` instead of ``alone``, or else the two whole.

    >>> _payload_difference('{"id": 1, "tracking": "TRK-83"}', '{"id": 1, "tracking": "TRK-12"}')
    "field 'tracking' is 'TRK-83' instead of 'TRK-12'"
    """
    import json

    try:
        now, before = json.loads(after), json.loads(alone)
    except (TypeError, ValueError):
        now, before = after, alone
    if isinstance(now, dict) and isinstance(before, dict):
        fields = sorted((k for k in set(now) | set(before) if now.get(k, _ABSENT) != before.get(k, _ABSENT)), key=str)
        shown = [f"field {k!r} is {short(now.get(k, _ABSENT), 60)} instead of {short(before.get(k, _ABSENT), 60)}" for k in fields[:3]]
        return ", ".join(shown) + (f" (and {len(fields) - 3} more)" if len(fields) > 3 else "")
    return f"{short(now, 80)} instead of {short(before, 80)}"


class _Absent:
    def __repr__(self) -> str:
        return "absent"


_ABSENT = _Absent()


def baseline_failures(scenario: Any, adapter: Target, baseline: Any, payload_hint: str) -> list[Violation]:
    """The family's run without any fault ends as the family expects: every job in one of its
    expected states (the workflow's final state, for a family without a poison fault).

    Protects the gate itself: a family whose baseline does not complete proves nothing by
    crashing (every crash "holds" when every job ends failed anyway), so it fails, with every
    job's final state and last_error (with the user's line that raised it, where one did) and what
    to check, and its points are not run.
    """
    if not baseline.final_states:
        if scenario.jobs:
            return [Violation("baseline", f"family {scenario.name!r} fails without any fault: no job is in the database after "
                                          f"its run ({payload_hint})")]
        return []
    expected = scenario.expected_states(adapter)
    wrong = {j: s for j, s in sorted(baseline.final_states.items()) if s not in expected}
    if not wrong:
        return []
    raised = getattr(baseline, "raised", {}) or {}
    shown = "; ".join(
        f"job {j!r} ended {s!r}" + (f" (last_error: {short(error)}{_raised_from(error, raised)})" if (error := baseline.last_errors.get(j)) else "")
        for j, s in wrong.items()
    )
    return [Violation(
        "baseline",
        f"family {scenario.name!r} fails without any fault, on every one of its points: {shown}; every job should end in "
        f"{' or '.join(map(repr, sorted(expected)))}. Check the step that set last_error; {payload_hint}",
    )]


def raised(where: str, error: str) -> Violation:
    r"""The code under test (the engine, the workflow, or the adapter) raised where the harness
    expects an answer: the scenario's result is an error, with the exception's last lines.

    Protects the gate from reading an exception as a pass, or from stopping every other point.

    The line quoted is the exception's own (``Type: message``), the first after the traceback's
    last frame: a message of several lines (SQLAlchemy's ends with a link) is named by its first.

    >>> raised("the worker", 'Traceback (most recent call last):\n  File "x.py", line 1, in f\n    g()\n'
    ...        "OperationalError: (sqlite3.OperationalError) database is locked\n(Background on this error at: https://x)").detail
    'the worker raised OperationalError: (sqlite3.OperationalError) database is locked'
    """
    lines = error.strip().splitlines()
    framed = [n for n, line in enumerate(lines) if line[:1].isspace()]
    last = lines[framed[-1] + 1] if framed and framed[-1] + 1 < len(lines) else lines[-1] if lines else "no traceback"
    return Violation("raised", f"{where} raised {last}")


def point_reached(where: str) -> Violation:
    """The worker, run again from the scenario's start, reached the point recorded in the clean
    run, and met its fault there: a scenario whose worker never got there tested nothing.

    Protects the gate from reporting a fault that was never injected as a fault the engine held.
    Held by an iteration that does the same when run again: it reads the clock and the random
    generator it is given, not the machine's.
    """
    return Violation("point-reached", f"{where} never reached the point when run again: its fault was never injected, "
                                      "so this scenario tested nothing")


def hangs(what: str, point: str, bound_s: float, stuck_at: str = "") -> Violation:
    """Every process of a scenario finishes within the scenario's bound: the worker killed or
    frozen at the point, the workers run meanwhile, the one resumed, the recovery.

    Protects against a worker that waits forever: a lock retried without limit, a call with no
    timeout, a resumed worker waiting for an answer from a peer that is gone. In production that
    is a job stuck with nobody told; in a gate, a run that never ends. Held by a timeout on every
    wait (the database's busy timeout, each call's deadline) and by giving up, recorded, after a
    bounded number of attempts. The harness's watchdog reports it with every thread's stack of
    the stuck process (the user's and the engine's frames first), kills it, and runs the next
    scenario; ``--scenario-timeout`` sets the bound.
    """
    at = f" at point '{point}'" if point else ""  # quoted: one cause at every point (chaos.core.findings.normalise)
    where = f"; stuck at {stuck_at}" if stuck_at else ""
    return Violation("hangs", f"{what} did not finish within {bound_s:g} s{at}{where}")


def short(value: Any, limit: int = 160) -> str:
    text = repr(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
# Checks of the harness itself rather than of the engine, named in results like invariants.
HARNESS_CHECKS: dict[str, Callable[..., Any]] = {"baseline": baseline_failures, "raised": raised, "point-reached": point_reached}
