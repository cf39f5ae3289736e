"""The fix of each finding, in the terms of a workflow's author: the common causes of each
invariant's violation (:data:`FIXES`), and, for an invariant with several causes, the fix of
each chosen by what its violation says (:data:`CAUSE_FIXES`).

>>> "same-outcome" in FIXES
True
"""

from __future__ import annotations

__all__ = ["FIXES", "CAUSE_FIXES"]


# The common causes of each finding, and the fix, in the terms of a workflow's author.
FIXES: dict[str, str] = {
    "legal-transitions": "a state was written without the table's check, or by a worker whose job had moved on: move "
                         "states only along the table's edges, with compare-and-swap (UPDATE ... WHERE state = :expected)",
    "no-spend-after-memo": "a step ran although its memo row was committed: look the memo up before running a step, and "
                           "skip the step when it is there",
    "bounded-spend": "a step was paid for more often than crashes explain: renew the lease while a step runs (a "
                     "heartbeat) and keep the step's deadline shorter than the lease; never retry a poison input",
    "memo-stable": "a memo row changed after it was written: insert it once (INSERT ... ON CONFLICT DO NOTHING) in the "
                   "step's completion transaction, never update or delete it",
    "cost-recorded": "a memo row records a price that is not an amount of money (negative, text, infinite, missing): "
                     "check the cost a step reports before committing its completion, and fail the step when it is not "
                     "a finite number >= 0",
    "progress-recorded": "the state moved past a step without its memo row: commit the memo row and the state change in "
                         "one transaction",
    "effects-complete": "a finished job lacks an effect, or has it twice: declare each effect on its Step and return it in "
                        "StepOutput(effects=...), so that the engine commits it with the step and the outbox sends it",
    "outbox-at-least-once": "an effect reached the receiver without a committed outbox row, twice, or never: return each "
                            "effect in StepOutput(effects=...) instead of sending it from the step, mark a row sent only "
                            "after delivering it, and send each effect's idempotency key to a receiver that dedupes on it",
    "effects-through-outbox": "a step acted on the world itself (a file written, a connection, a process started) instead "
                              "of returning the effect: return it in StepOutput(effects=...) and declare it on the Step, so "
                              "that it commits with the step and the outbox delivers it under its idempotency key; if it is "
                              "no effect (a cache, a read-only service), allow it with --chaos-allow-effects",
    "drains": "a job or an outbox row stayed stuck: release the lease on every way out of a step (done, retry, failure), "
              "let expired leases be claimed, and back off instead of raising when the database is locked",
    "fenced-writes": "a worker wrote to a job after another had taken it over: hand out a fencing token with each claim "
                     "and guard every write with it (WHERE token = :mine), not with the state alone",
    "idempotent-submit": "a repeated submit changed or duplicated a job: use the caller's id as the key (INSERT ... ON "
                         "CONFLICT DO NOTHING) and refuse another payload for it (or declare submit_conflict)",
    "same-outcome": "a crash changed how a job ends: a step read state kept in process memory, behaved differently on a "
                    "second attempt, or needs more than the memo rows hold; make each step a function of the payload and "
                    "the earlier steps' memo rows only",
    "baseline": "the workflow fails without any fault: read the jobs' last_error above; for the payload, give your adapter "
                "a payload(job_id) method",
    "raised": "the code under test raised: the traceback's last lines are above, the replay command reruns it alone",
    "hangs": "a process of the scenario waited without end (its stack is in the report): give every wait a bound (the "
             "database's busy timeout, each call's deadline), give up after a bounded number of retries and record why, "
             "never wait for a worker that may be dead; if the engine is only slow, raise --scenario-timeout",
    "point-reached": "the worker never reached the point when run again, so its fault was never injected: make the "
                     "iteration deterministic (the clock and the random generator it is given, not the machine's); the "
                     "replay command reruns the scenario alone",
}


# The fix of each cause of an invariant that has several, chosen by what its violation's detail says
# (a regular expression, searched in order; the first that matches wins, and FIXES holds the fix when
# none does): the advice shown is the one that applies, not every cause's at once.
_SENT_FROM_STEP = ("the step sent the effect itself, before the engine committed the step: return the effect in "
                   "StepOutput(effects=...) and declare it on the Step (Step(..., effects=(KIND,))), so that the engine "
                   "commits it with the step's result and the outbox sender delivers it afterwards")
CAUSE_FIXES: dict[str, tuple[tuple[str, str], ...]] = {
    "outbox-at-least-once": (
        (r"without a committed outbox row", _SENT_FROM_STEP),
        (r"applied \d+ times at the receiver \(.*sent from [^()]*\S+\.py:\d+", _SENT_FROM_STEP),
        (r"marked sent but was never delivered", "a row was marked sent although the receiver never had it: deliver "
                                                 "first, then mark the row sent, so that a crash in between re-sends "
                                                 "instead of losing the effect"),
        (r"committed but never delivered", "a committed outbox row was never sent: run the outbox sender after the "
                                           "steps, let it pick up every unsent row (also one a crashed sender left), "
                                           "and retry a failed delivery"),
        (r"applied \d+ times at the receiver", "the outbox sender re-sent an effect that had arrived, to a receiver "
                                                "that applies every delivery: send each effect's idempotency key to a "
                                                "receiver that dedupes on it, or make the delivery and the mark-sent one "
                                                "transaction with the receiver"),
    ),
    "effects-complete": (
        (r"was applied 0 times", "a finished job lacks an effect: declare each effect on its Step and return it in "
                                 "StepOutput(effects=...), so that the engine commits it with the step and the outbox "
                                 "sends it"),
        (r"was applied \d+ times", "a finished job has an effect more than once: return the effect in "
                                    "StepOutput(effects=...) instead of sending it from the step, and send its "
                                    "idempotency key to a receiver that dedupes on it"),
    ),
}
