"""The faults a dependency's call can meet: their kinds, a :class:`Fault` to arm, and the error
each raises.

A fault stands for what a provider does on a bad day: a timeout, a reset connection, a 429 with
Retry-After, a 5xx, a 400, an answer a step cannot parse or use, a price no ledger can add up, a
call that outlives the lease or hangs; or, through a call, a store that cannot commit (a held
lock, a full disk, EIO). The world (:mod:`chaos.core.world`) arms them and brings each on the call
it meets; :func:`raise_fault` raises the error a failing dependency would, typed as the engine
expects (:mod:`chaos.core.errors`).

>>> Fault("rate_limit", task="extract", retry_after_s=30)
Fault(kind='rate_limit', task='extract', retry_after_s=30, duration_s=None, sticky=False, per_job=0, jobs=())
>>> try:
...     raise_fault(Fault("timeout"), "extract")
... except Exception as error:
...     print(type(error).__name__, error)
StepTimeout extract: model call timed out
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from chaos.core.errors import ENGINE_ERRORS

__all__ = [
    "ANSWER_FAULTS", "ASTRAL", "ASTRAL_ANSWER", "BUG", "FAULT_KINDS", "Fault", "HANG", "HANG_REAL_S", "MATRIX_FAULT_KINDS",
    "OUTCOME_FAULTS", "PRICE_FAULTS", "SLOW_CALL_S_DEFAULT", "STALL", "STORE_FAULT_KINDS", "TOO_LARGE", "TOO_LARGE_CHARS",
    "UNPRICED", "UNSTORABLE", "raise_fault",
]

FAULT_KINDS = (
    "timeout",
    "connection",
    "rate_limit",
    "server_error",
    "bad_request",
    "parse",
    "verify_fail",
    "slow",
)
# Faults a call brings on the engine's store instead of answering with an error: the call answers,
# and the commit after it meets a write lock held elsewhere, a full disk, or a disk whose writes
# (or reads) fail with EIO. They act in the calling worker's own process, through the hook its run
# installs (World.on_store_fault, see chaos.core.store_faults): the crash matrix's store-busy,
# disk-full and I/O families.
STORE_FAULT_KINDS = frozenset({"lock_held", "disk_full", "io_error", "io_read_error"})
# A call that stalls past the lease at once (a long GC pause inside it), while the world's
# during_slow hook runs another worker, then heartbeats: the crash matrix's stalled-call family.
STALL = "stall"
# An answer the store cannot hold (a JSON object with NaN in it, which Python's json reads): the
# crash matrix's extract-unstorable family. Matrix-only, as STALL is: random histories do not draw it.
UNSTORABLE = "unstorable"
# The model's answers that a step reads but cannot use, by fault kind (UNSTORABLE among them): NaN
# after values of every other kind (the store's check walks them all first), a lone surrogate
# (Python's json reads "\\ud800"; UTF-8 cannot encode it) and JSON that is not the object a
# step expects. Each is poison, and matrix-only.
ANSWER_FAULTS: dict[str, str] = {
    UNSTORABLE: '{"pages": [NaN, true, null, "p. 1", 2.5]}',
    "unstorable_text": '{"title": "\\ud800 (half of a character)"}',
    "not_object": '["title", "words"]',
    # Nesting past the store's limit (200 levels), which Python's json reads without complaint.
    "too_deep": '{"pages": ' + "[" * 201 + "]" * 201 + "}",
}
# An answer the store can hold as it is, though only a careful encoder keeps it whole: a title with
# a character outside the Basic Multilingual Plane (an emoji, which JSON writes as a surrogate
# pair). The step completes; a step that answers it on every call (sticky) ends as without it.
ASTRAL = "astral"
ASTRAL_ANSWER = '{"title": "Invoice \\ud83d\\udcc4 for March", "words": 4}'
# A step's own bug: the call raises KeyError, which no engine should retry (matrix-only).
BUG = "bug"
# An answer whose price is not a number (a billing API that could not price the call: NaN).
UNPRICED = "unpriced"
# The prices a billing API may answer that no spend ledger can add up, by fault kind: NaN, no
# price at all (null), the price as text, a credit (a negative price), an integer past any float. Each is poison, and
# matrix-only.
PRICE_FAULTS: dict[str, Any] = {
    UNPRICED: float("nan"),
    "price_missing": None,
    "price_text": "0.004",
    "price_negative": -0.004,
    "price_overflow": 10**400,
}
# A call that hangs (a connection that never answers): the fake clock moves on by the fault's
# duration_s at once, past the step's timeout, while the calling thread blocks in real time for
# longer than any iteration lasts, until its process ends. The worker's own wait times out in
# real time, then reads the fake clock: it gives the step up as timed out. Armed for the doomed
# iteration only (never sticky): a recovery in another process never meets it. Matrix-only.
HANG = "hang"
HANG_REAL_S = 60.0
# A document far larger than any step should take (a megabyte; matrix-only).
TOO_LARGE = "too_large"
TOO_LARGE_CHARS = 1_000_000
# The kinds only the crash matrix's families arm (random histories draw from FAULT_KINDS).
MATRIX_FAULT_KINDS = (STALL, HANG, BUG, TOO_LARGE, ASTRAL, *PRICE_FAULTS, *ANSWER_FAULTS)
# Faults after which a step ends otherwise than it would (failed, or waiting for a person): once,
# they change the outcome of the call they hit; a crash before that call, recovered with the
# fault gone, rightly ends elsewhere.
OUTCOME_FAULTS = frozenset({"bad_request", "parse", "verify_fail", BUG, TOO_LARGE, *PRICE_FAULTS, *ANSWER_FAULTS})
# A 400 carries the API's whole explanation, longer than any last_error an engine should keep:
# the engine must clip it, not fail to store it.
BAD_REQUEST = (
    '400 Bad Request: {"error": {"type": "invalid_request_error", "code": "context_length_exceeded", "param": "messages", '
    '"message": "This model\'s maximum context length is 8192 tokens. However, your messages resulted in 9421 tokens '
    '(9101 in the messages, 320 in the functions). Please reduce the length of the messages or functions. The request '
    'was not processed; retrying it unchanged will fail the same way. See the '
    'documentation on context windows for how to count tokens before sending a request, and on chunking for how to '
    'split a long document into requests that fit."}}'
)
MESSAGES = {"timeout": "model call timed out", "connection": "connection reset by peer",
            "server_error": "503 Service Unavailable", "bad_request": BAD_REQUEST}


SLOW_CALL_S_DEFAULT = 180.0


@dataclass(frozen=True)
class Fault:
    """A fault for the next call of ``task`` (any task if None).

    ``kind`` is one of :data:`FAULT_KINDS`, :data:`STORE_FAULT_KINDS` (with ``duration_s``, the
    call then lasts that long, heartbeating: the heartbeats meet the fault too), :data:`STALL`
    (which takes ``duration_s``, default the lease and a second, at once, without a heartbeat,
    then runs ``during_slow`` and heartbeats once), :data:`HANG` (``duration_s`` of fake time at
    once, then a block in real time that outlasts the process), a kind of :data:`ANSWER_FAULTS` (the model's
    answer is that text), :data:`BUG` (the call raises KeyError), a kind of :data:`PRICE_FAULTS`
    (the answer's price is that value), :data:`ASTRAL` (an answer with an emoji in it) or :data:`TOO_LARGE` (a document of :data:`TOO_LARGE_CHARS` characters). A
    fault that raises (``timeout``, ...) with ``duration_s`` stalls that long first, as STALL does:
    an error that takes its time to arrive.
    ``slow`` takes ``duration_s`` (default 180 s) of fake
    time, heartbeating as the engine's heartbeat would, and runs the world's ``during_slow`` hook
    once the lease would have expired without heartbeats (a second worker, typically). A
    ``sticky`` fault is not used up: a poison input fails the same way on every call.

    A sticky fault with ``per_job=n`` hits only each job's first ``n`` calls of ``task``, counted in
    the ledger's fault table (so across every process of a scenario: the doomed worker, the one that
    recovers): an outage that all jobs meet at once and that each outlives after ``n`` failures,
    never so many that a job runs out of attempts. Faults with ``per_job`` armed one after another
    take turns: ``connection`` once, then ``timeout`` twice, is three failures in a row per job.

    A fault with ``jobs`` hits only those jobs' calls (every job's if empty): an outage a history
    lets a herd of its own meet, leaving the history's other jobs to the faults drawn for them.

    >>> Fault("timeout", task="extract", per_job=2)
    Traceback (most recent call last):
    ...
    ValueError: fault 'timeout' with per_job=2 must be sticky (it hits each job's first 2 calls): add sticky=True
    """

    kind: str
    task: str | None = None
    retry_after_s: float | None = None
    duration_s: float | None = None
    sticky: bool = False
    per_job: int = 0
    jobs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS and self.kind not in STORE_FAULT_KINDS and self.kind not in MATRIX_FAULT_KINDS:
            kinds = ", ".join(FAULT_KINDS + tuple(sorted(STORE_FAULT_KINDS)) + MATRIX_FAULT_KINDS)
            raise ValueError(f"fault kind {self.kind!r} is not one of: {kinds}")
        if self.per_job < 0:
            raise ValueError(f"fault {self.kind!r}: per_job={self.per_job} must be >= 0 (0: every call, or the next one)")
        if self.per_job and not self.sticky:
            raise ValueError(f"fault {self.kind!r} with per_job={self.per_job} must be sticky (it hits each job's first "
                             f"{self.per_job} calls): add sticky=True")
        if self.kind == HANG and (self.sticky or not self.duration_s or self.duration_s <= 0):
            raise ValueError("fault 'hang' takes duration_s > 0 (the fake time it moves on, past the step's timeout) and "
                             "is never sticky (every call in every process would hang)")



def raise_fault(fault: Fault, task: str, errors: Mapping[str, Callable[[str], BaseException]] | None = None) -> None:
    """Raise the error a failing dependency would produce for ``fault``, typed by ``errors``
    (fault kind -> a factory taking the message; :data:`ENGINE_ERRORS` by default)."""
    if fault.kind == BUG:
        raise KeyError(f"{task}: 'total' (the step read a field the answer does not have)")
    make = (ENGINE_ERRORS if errors is None else errors).get(fault.kind)
    if make is None:
        return  # parse, verify_fail and slow answer (or take their time) instead of raising
    if fault.kind == "rate_limit":
        raise make(f"{task}: 429 Too Many Requests", fault.retry_after_s)  # type: ignore[call-arg]
    raise make(f"{task}: {MESSAGES[fault.kind]}")
