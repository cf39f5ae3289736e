"""What one :meth:`Worker.run_once` did, as a vocabulary: the :class:`Outcome` of a run.

The outcomes are strings (a :class:`~enum.StrEnum`), so they compare equal to the words a log or
an older caller uses, and print as those words; code names them through the enum, defined once.

>>> Outcome.DONE == "done", Outcome("lease_lost") is Outcome.LEASE_LOST
(True, True)
>>> Outcome.BUSY in STORE_UNAVAILABLE
True
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Outcome", "STORE_UNAVAILABLE", "NO_PROGRESS"]


class Outcome(StrEnum):
    """The outcome of one worker iteration."""

    IDLE = "idle"  # nothing was due
    BUSY = "busy"  # the database stayed locked: try later
    UNAVAILABLE = "unavailable"  # the database failed (disk full, I/O error): back off, try later
    DONE = "done"  # the job reached its final state
    ADVANCED = "advanced"  # progress; the job was released for later
    RETRY = "retry"  # a retryable failure; a backoff was scheduled
    FAILED = "failed"  # the job went to a failed state
    NEEDS_HUMAN = "needs_human"  # the job waits for a person's review
    QUARANTINED = "quarantined"  # a damaged row: the job was parked in a failed state
    LEASE_LOST = "lease_lost"  # another worker took the job over; nothing was written

    def __repr__(self) -> str:
        # A RunResult prints as RunResult(outcome='done', ...), as it did when outcomes were str.
        return repr(self.value)


# The database could not take the iteration's writes: nothing was written, try again later.
STORE_UNAVAILABLE = frozenset({Outcome.BUSY, Outcome.UNAVAILABLE})
# The iteration moved no job: a loop that drains a queue sleeps (or stops) on these.
NO_PROGRESS = frozenset({Outcome.IDLE, Outcome.BUSY})
