"""Every error the engine raises on purpose, in one place.

Operating errors (bad input, a lost lease, an illegal human action) are typed exceptions whose
messages name the input and the fix. Step functions signal *how* they failed with the step errors
below: a retryable failure is tried again with full-jitter backoff, a poison failure never is.
"""

from __future__ import annotations

__all__ = [
    "EngineError",
    "InvalidInput",
    "IdempotencyConflict",
    "UnknownJob",
    "IllegalTransition",
    "IllegalAction",
    "SchemaMismatch",
    "LeaseLost",
    "StoreBusy",
    "StoreFailed",
    "CommitUnknown",
    "DamagedRow",
    "StepError",
    "RetryableError",
    "StepTimeout",
    "ConnectionFailed",
    "RateLimited",
    "ServerError",
    "PoisonError",
    "BadRequest",
    "ValidationFailed",
    "ParseFailed",
]


class EngineError(Exception):
    """Base class of the operating errors the engine raises."""


class InvalidInput(EngineError, ValueError):
    """An argument the caller passed is malformed; nothing was stored."""


class IdempotencyConflict(EngineError):
    """A job id was submitted again with a different payload."""

    def __init__(self, job_id: str, stored: str, offered: str) -> None:
        self.job_id = job_id
        super().__init__(
            f"job {job_id!r} already exists with a different payload "
            f"(stored {_clip(stored)}, offered {_clip(offered)}); job ids are idempotency keys: "
            "submit the same payload to get the existing job, or use a new id for new work"
        )


class UnknownJob(EngineError, LookupError):
    """No job has this id."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(
            f"no job with id {job_id!r}; check the id (ids are exact, case-sensitive strings); "
            "`python -m engine status` shows how many jobs are in each state"
        )


class IllegalTransition(EngineError):
    """A move that is not an edge of the workflow's state table: a bug where it is raised."""

    def __init__(self, from_state: str, to_state: str, allowed: tuple[str, ...]) -> None:
        self.from_state = from_state
        self.to_state = to_state
        options = ", ".join(allowed) if allowed else "nothing (terminal state)"
        super().__init__(
            f"illegal transition {from_state!r} -> {to_state!r}; from {from_state!r} the table allows: {options}"
        )


class IllegalAction(EngineError):
    """A human operation asked of a job whose state does not allow it; nothing changed."""

    def __init__(self, job_id: str, action: str, state: str, allowed_states: tuple[str, ...]) -> None:
        self.job_id = job_id
        self.action = action
        self.state = state
        super().__init__(
            f"job {job_id!r} is in state {state!r}; {action} needs one of: {', '.join(allowed_states)}"
        )


class SchemaMismatch(EngineError):
    """The database belongs to something else or to a newer engine; it was not modified."""


class LeaseLost(EngineError):
    """This worker's lease was taken over (fencing token changed); it must stop and write nothing."""


class StoreBusy(EngineError):
    """The database stayed locked past the busy timeout (another process holds its write lock).

    Nothing was written; the caller backs off and tries again later. A worker treats it as "no
    progress this iteration", never as a crash.
    """


class StoreFailed(EngineError):
    """The database refused a read or a write for a reason of the machine under it.

    Disk full (SQLite's ``SQLITE_FULL``), an I/O error (``EIO`` from ``write``, ``fsync``), a
    read-only file system, a lost server. The transaction that failed was rolled back: nothing of
    it was written. A worker treats it like :class:`StoreBusy`, as "no progress this iteration":
    it backs off and tries again, and its job is taken up again once its lease expires. If the
    error persists, the message says what the database reported: free disk space or check the
    device.
    """


class CommitUnknown(StoreFailed):
    """The connection was lost during COMMIT: the transaction may or may not have been written.

    Only the server knows; the client cannot tell. Everything the engine writes is safe to do
    again (a submit is idempotent by id, and a worker's writes are fenced by its lease), so the
    fix is to repeat the operation or read back what it would have changed. A worker treats it
    like any :class:`StoreFailed`: it backs off, and the job is taken up again after its lease.
    """


class DamagedRow(EngineError, ValueError):
    """A row holds what the engine never writes: a payload or memo output that is not JSON.

    The worker quarantines the job (a failed state, with this message as ``last_error``) and
    goes on with the others; nothing is retried until a person repairs the row and requeues it.
    """

    def __init__(self, job_id: str, what: str, detail: str, fix: str, *, problem: str = "is not valid JSON") -> None:
        self.job_id = job_id
        super().__init__(f"{what} of job {job_id!r} {problem} ({detail}); {fix}")


class StepError(Exception):
    """Base class of the failures a step reports. ``retryable`` decides what the engine does."""

    retryable = False


class RetryableError(StepError):
    """A transient failure: the same call may succeed later (timeouts, 429, 5xx, connection errors)."""

    retryable = True


class StepTimeout(RetryableError):
    """The call did not answer within its timeout."""


class ConnectionFailed(RetryableError):
    """The connection to a dependency failed before an answer arrived."""


class RateLimited(RetryableError):
    """HTTP 429. ``retry_after_s`` (from the Retry-After header) is honoured as a minimum delay
    (by the outbox, up to ``engine.RETRY_AFTER_S_MAX``)."""

    def __init__(self, message: str = "429 Too Many Requests", retry_after_s: float | None = None) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message)


class ServerError(RetryableError):
    """HTTP 5xx from a dependency."""

    def __init__(self, message: str = "500 Internal Server Error", status: int = 500) -> None:
        self.status = status
        super().__init__(message)


class PoisonError(StepError):
    """A failure that will recur on every attempt: the job goes to its failed state after one call."""


class BadRequest(PoisonError):
    """HTTP 400: the request itself is wrong."""


class ValidationFailed(PoisonError):
    """The input or the answer does not satisfy its schema."""


class ParseFailed(PoisonError):
    """The answer could not be parsed."""


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
