"""The scenario families of the reference crash matrix, each teaching one lesson.

Every family's doomed iteration is recorded and killed at each of its crash points. Together they
reach the error paths as well as the happy path: retry with backoff, Retry-After, poison, review,
a lease taken over, a job that kills every worker, a step whose attempts run out, a receiver that
is down, the retry storm after an outage that sixteen jobs meet at once, and a crash on the path a
busy or full database opens (the write lock held elsewhere, the disk full, brought on by a call).
"""

from __future__ import annotations

from chaos.adapter import job_ref
from chaos.core.scenario import AT_START, Scenario
from chaos.core.world import ASTRAL, BUG, HANG, STALL, TOO_LARGE, UNPRICED, UNSTORABLE, Fault

__all__ = ["reference_scenarios", "STORM_JOBS", "STORM_FAULTS"]

LEASE_EXPIRY = "advance:121"
FIRST = job_ref(1)  # a family names the adapter's jobs by position: its findings name the user's ids
RETRY_WAIT = "advance:33"  # past any backoff of the first four attempts (full jitter, at most 2**4 s)
# The retry storm: enough jobs that a herd is a herd (chaos.core.invariants.HERD_MIN wide
# retries), few enough that each point's recovery stays cheap. Random histories let a herd as
# large meet the same faults (chaos.histories.events.Storm).
STORM_JOBS = tuple(job_ref(n) for n in range(1, 17))  # the adapter's first sixteen jobs
# Each job's extract fails three times in a row (a refused connection, then two timeouts), then
# answers: every job's last retry is drawn from full jitter's widest early window (1-8 s), and no
# job comes near its five attempts (a crash and its lease takeover use one more, at most).
STORM_FAULTS = (
    Fault("connection", task="extract", sticky=True, per_job=1),
    Fault("timeout", task="extract", sticky=True, per_job=2),
)


def reference_scenarios() -> list[Scenario]:
    """The families the reference matrix runs (any adapter of the reference workflow can use them)."""
    return [
        Scenario("clean", "A crash at any line of a job's run leaves one of two cases: the step re-runs, or its memo is found and it is skipped."),
        Scenario("sender", "A crash between delivering and marking re-delivers the same key; a receiver that dedupes applies it once, a strict one twice.", setup=("run",), phase="sender"),
        Scenario("sender-fail", "A failed delivery is retried later with backoff, never marked sent.", setup=("run",), phase="sender", faults=(Fault("connection", task="send"),)),
        Scenario(
            "inline-steps",
            "A worker configured to run its steps inline, with a step timeout of its own, keeps every promise the "
            "default one keeps: a crash at any line re-runs the step or finds its memo.",
            worker=(("threaded", False), ("step_timeout_s", 60.0)),
        ),
        Scenario("resume", "A job whose worker died is taken over once its lease expires, and resumes at its step.", setup=("claim:w-dead", LEASE_EXPIRY)),
        Scenario(
            "give-up",
            "A job that killed five workers in a row is parked in its failed state, so it cannot take a sixth down.",
            setup=("claim:w-dead1", LEASE_EXPIRY, "claim:w-dead2", LEASE_EXPIRY, "claim:w-dead3", LEASE_EXPIRY,
                   "claim:w-dead4", LEASE_EXPIRY, "claim:w-dead5", LEASE_EXPIRY),
            expect=("<parked>",),
        ),
        Scenario("extract-timeout", "A timeout is retried after a full-jitter backoff.", faults=(Fault("timeout", task="extract"),)),
        Scenario("extract-429", "A 429's Retry-After is honoured as the minimum delay.", faults=(Fault("rate_limit", task="extract", retry_after_s=60),)),
        Scenario("extract-5xx", "A 5xx is retried; the failed call is the only waste.", faults=(Fault("server_error", task="extract"),)),
        Scenario("fetch-connection", "A connection error in the first step retries from pending.", faults=(Fault("connection", task="fetch"),)),
        Scenario("extract-400", "A poison input (400) is paid for once and parked in the failed state, never retried.", faults=(Fault("bad_request", task="extract", sticky=True),)),
        Scenario("extract-parse", "An answer that does not parse is poison: one call, then the failed state.", faults=(Fault("parse", task="extract", sticky=True),)),
        Scenario("verify-fail", "A review that cannot pass parks the job in needs_human, with no memo to skip it later.", faults=(Fault("verify_fail", task="verify", sticky=True),)),
        Scenario(
            "cancel-race",
            "A person's cancel and a worker's claim race for a pending job: compare-and-swap on the state lets exactly one of them win.",
            phase=f"human:cancel:{FIRST}",
            expect=("cancelled",),
            allowed=("<final>",),  # a cancel killed before its commit never happened: the worker finishes the job
        ),
        Scenario(
            "retry-storm",
            "Sixteen jobs meet the same outage at once and fail three times in a row; full-jitter backoff spreads their "
            "retries, so the recovery does not become a second outage.",
            jobs=STORM_JOBS,
            faults=STORM_FAULTS,
            expect=("<final>",),
            paced=True,
        ),
        Scenario(
            "extract-outage",
            "A step that fails on every attempt is retried with backoff until its attempts run out, then parked in its "
            "failed state for a person: never retried forever, never dropped.",
            setup=("run", RETRY_WAIT, "run", RETRY_WAIT, "run", RETRY_WAIT, "run", RETRY_WAIT),
            faults=(Fault("timeout", task="extract", sticky=True),),
            expect=("<parked>",),
        ),
        Scenario(
            "extract-unstorable",
            "An answer the store cannot hold (NaN in a JSON object) is poison: the step fails once, saying why, and is "
            "parked in its failed state; it never escapes the worker's loop, and is never retried.",
            faults=(Fault(UNSTORABLE, task="extract", sticky=True),),
        ),
        Scenario(
            "extract-unstorable-text",
            "An answer holding text UTF-8 cannot encode (a lone surrogate, which JSON's \\ud800 reads as) is poison "
            "too: refused before the commit, never stored half-written, parked in the failed state.",
            faults=(Fault("unstorable_text", task="extract", sticky=True),),
        ),
        Scenario(
            "extract-not-object",
            "An answer that is valid JSON but not the object the step needs is poison: one paid call, then the "
            "failed state, never a retry.",
            faults=(Fault("not_object", task="extract", sticky=True),),
        ),
        Scenario(
            "extract-bug",
            "A step's own bug (a KeyError the engine does not know) is not retried five times at the model's price: "
            "it is parked in the failed state with the error, for a person to fix the code and requeue the job.",
            faults=(Fault(BUG, task="extract", sticky=True),),
        ),
        Scenario(
            "extract-unpriced",
            "An answer whose price is not a number (NaN from a billing API) cannot enter the spend ledger: the step "
            "fails as poison, saying why, and the cost report never sums to NaN.",
            faults=(Fault(UNPRICED, task="extract", sticky=True),),
        ),
        Scenario(
            "extract-price-missing",
            "An answer without a price (null where the billing API should say what the call cost) is not a cost of "
            "zero: the step fails as poison, saying why, and no report sums a guess.",
            faults=(Fault("price_missing", task="extract", sticky=True),),
        ),
        Scenario(
            "extract-price-text",
            "A price that arrives as text (\"0.004\") is not a number to add up: the step fails as poison, saying "
            "why, instead of storing a cost no report can sum.",
            faults=(Fault("price_text", task="extract", sticky=True),),
        ),
        Scenario(
            "extract-price-negative",
            "A negative price (a credit the billing API folded into a call) is refused, not subtracted from the "
            "spend: the step fails as poison, and the cost report only ever grows.",
            faults=(Fault("price_negative", task="extract", sticky=True),),
        ),
        Scenario(
            "extract-price-overflow",
            "An integer price past any float (a billing bug) is refused by name, not raised as an OverflowError out "
            "of the worker's loop: the step fails as poison.",
            faults=(Fault("price_overflow", task="extract", sticky=True),),
        ),
        Scenario(
            "extract-too-deep",
            "An answer nested past the store's limit (JSON reads 201 levels without complaint) is refused before the "
            "commit, saying where: poison, never a RecursionError in the worker.",
            faults=(Fault("too_deep", task="extract", sticky=True),),
        ),
        Scenario(
            "extract-astral",
            "An answer holding a character outside the Basic Multilingual Plane (an emoji, a surrogate pair in "
            "JSON) is stored and read back whole: the job ends as with any other answer.",
            faults=(Fault(ASTRAL, task="extract", sticky=True),),
            expect=("<final>",),
        ),
        Scenario(
            "fetch-too-large",
            "A document larger than the step takes is refused before any paid call and parked in the failed state: "
            "the limit is checked where the input arrives, not where it costs.",
            faults=(Fault(TOO_LARGE, task="fetch", sticky=True),),
        ),
        Scenario(
            "poison-payload",
            "A payload the first step refuses is poison: it fails once, saying why, and is parked in the failed state, "
            "never retried.",
            poison=True,
            expect=("<parked>",),
        ),
        Scenario(
            "damaged-payload",
            "A stored row the engine cannot parse (a damaged disk, a bad migration) is quarantined in a failed state "
            "with the reason in last_error, never crashed on and never retried.",
            setup=(f"damage:payload:{FIRST}",),
            expect=("<parked>",),
        ),
        Scenario(
            "damaged-memo",
            "A memo row the engine cannot parse is found when the next step loads its inputs: the job is quarantined "
            "in a failed state naming the row to delete, never crashed on, and no step runs on a damaged input.",
            # The job stops at its review (its first try times out) with the earlier steps' memos
            # committed; the first step's is damaged, and the review's retry loads it as input.
            setup=("run", f"damage:memo:{FIRST}", RETRY_WAIT),
            faults=(Fault("timeout", task="verify", sticky=True, per_job=1),),
            expect=("<parked>",),
        ),
        Scenario(
            "damaged-state",
            "A job whose stored state the table does not know (a bad migration, a hand edit) is quarantined in a "
            "parked state, never run: no step guesses where a job it cannot place stands.",
            setup=(f"damage:state:{FIRST}",),
            expect=("<parked>",),
        ),
        Scenario(
            "requeued-after-quarantine",
            "A job quarantined out of a damaged state and requeued by a person starts again from the first step, and "
            "every step whose memo row survived is skipped: nothing already paid for is paid for again.",
            # The job stops at its review (its first try times out) with the earlier steps' memos
            # committed; then its state is damaged, it is quarantined, and a person requeues it.
            setup=("run", f"damage:state:{FIRST}", RETRY_WAIT, "run", f"requeue:{FIRST}"),
            faults=(Fault("timeout", task="verify", sticky=True, per_job=1),),
            expect=("<final>",),
        ),
        Scenario(
            "claimable-parked",
            "A parked job made claimable outside the engine (its next_run_at set by hand) is only released when a "
            "worker claims it: it keeps its state, runs no step, and stops being claimable.",
            setup=(f"damage:state:{FIRST}:<parked>",),
            expect=("<parked>",),
        ),
        Scenario(
            "store-busy",
            "A write lock held elsewhere past the busy timeout fails the step's commit as 'busy', never the step: nothing "
            "of it is written, and the job is taken up again once its lease expires.",
            faults=(Fault("lock_held", task="extract"),),
        ),
        Scenario(
            "commit-io-error",
            "A disk that fails a write (EIO) fails the step's COMMIT, not the worker: the transaction is rolled back, "
            "nothing of it is written, and the job is taken up again once its lease expires.",
            faults=(Fault("io_error", task="extract"),),
        ),
        Scenario(
            "claim-io-error",
            "A disk that fails the claim's write is 'unavailable', never 'no work' and never a crash: the worker "
            "backs off, and the job is claimed once the disk works again.",
            faults=(Fault("io_error", task=AT_START),),
        ),
        Scenario(
            "sender-read-error",
            "A disk that fails the sender's read of due rows sends nothing and marks nothing: the rows wait, "
            "whole, for a pass that can read them.",
            setup=("run",),
            phase="sender",
            faults=(Fault("io_read_error", task=AT_START),),
        ),
        Scenario(
            "heartbeat-busy",
            "A heartbeat that meets the write lock held elsewhere skips its renewal instead of failing the step: the "
            "lease still runs, and the commit after the call meets the same lock and backs off as 'busy'.",
            faults=(Fault("lock_held", task="extract", duration_s=15),),  # one heartbeat, at 15 s
        ),
        Scenario(
            "disk-full",
            "A full disk fails the step's commit, not the worker: nothing of the transaction is written, and the job is "
            "taken up again once its lease expires, its one paid call the only waste.",
            faults=(Fault("disk_full", task="extract"),),
        ),
        Scenario(
            "claim-busy",
            "A write lock held elsewhere when the worker claims is 'busy', never 'no work' and never a crash: the worker "
            "backs off, and claims the job once the lock is gone.",
            faults=(Fault("lock_held", task=AT_START),),
        ),
        Scenario(
            "stalled-call",
            "A call that stalls past the lease (a long GC pause inside it) loses the job to another worker: the stalled "
            "worker's next heartbeat learns it, and it writes nothing; fencing would stop it if it tried.",
            faults=(Fault(STALL, task="extract"),),
            second_worker=True,
        ),
        Scenario(
            "slow-timeout",
            "A call that times out only after its lease has run out fails a step that another worker has taken over "
            "meanwhile: the retry it would schedule is fenced, and the other worker's work stands.",
            faults=(Fault("timeout", task="extract", duration_s=121),),
            second_worker=True,
        ),
        Scenario(
            "clock-skew",
            "A worker whose clock runs ahead takes over a job whose lease has not yet expired by its owner's clock; "
            "the owner's next heartbeat learns it lost the job and its step stops, writing nothing: fencing, not "
            "clocks, keeps one writer.",
            faults=(Fault(STALL, task="extract", duration_s=30),),
            second_worker=True,
            second_worker_ahead_s=100,
        ),
        Scenario(
            "sender-fail-busy",
            "A failed delivery whose retry time cannot be written (the write lock held elsewhere) loses its backoff, "
            "never its row: the row is due again at once, and delivered later.",
            setup=("run",),
            phase="sender",
            faults=(Fault("lock_held", task=AT_START), Fault("connection", task="send")),
        ),
        Scenario(
            "cancel-unknown",
            "A person's cancel of a job that does not exist (a typo in the id) is refused with the engine's clear "
            "error, and changes nothing.",
            phase="human:cancel:doc-404",
        ),
        Scenario(
            "cancel-nul-id",
            "A person's cancel of an id no database can store (it holds a NUL character) names no job: the engine's "
            "clear error, not a database error, and nothing changes.",
            phase=f"human:cancel:{FIRST}\x00",
        ),
        Scenario(
            "cancel-half-character-id",
            "A person's cancel of an id UTF-8 cannot encode (a lone surrogate, half of a character) names no job "
            "either: the same clear error on every backend, and nothing changes.",
            phase="human:cancel:doc-\udc80",
        ),
        Scenario(
            "cancel-too-late",
            "A person's cancel of a job that has already finished is refused with the engine's clear error, and "
            "changes nothing.",
            setup=("run",),
            phase=f"human:cancel:{FIRST}",
        ),
        Scenario(
            "sender-busy",
            "A write lock held while the sender marks its rows leaves them unsent: they are delivered again later, and "
            "the receiver dedupes.",
            setup=("run",),
            phase="sender",
            faults=(Fault("lock_held", task="send"),),
        ),
        Scenario(
            "slow-call",
            "A call that takes longer than usual heartbeats as it goes, and the lease is renewed only when that gains "
            "an eighth of it: a step may heartbeat as often as it likes without a commit each time.",
            faults=(Fault("slow", task="extract", duration_s=20),),
        ),
        Scenario(
            "hung-call",
            "A call that never answers is given up at the step's timeout: the worker stops waiting, fails the step as "
            "timed out and retries it later, and whatever the hung thread does afterwards it can write nothing.",
            faults=(Fault(HANG, task="extract", duration_s=0.3),),
            worker=(("step_timeout_s", 0.2),),  # the worker's wait, a quarter of it, is 0.05 s of real time
        ),
        Scenario(
            "lost-lease",
            "A 180 s call against a 120 s lease stays safe: heartbeats keep the lease, and fencing stops a worker that lost it.",
            faults=(Fault("slow", task="extract", duration_s=180),),
            second_worker=True,
        ),
    ]
