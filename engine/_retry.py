"""Which failures are retried, and when: full-jitter backoff, Retry-After, poison.

Timeouts, connection errors, 429 and 5xx are retried after ``uniform(1, min(32, 2**attempt))``
seconds, at most :data:`ATTEMPTS_MAX` attempts. Without the jitter, every job that failed during an
outage would retry at the same instant when it ends, and the recovery would become the second
outage. A 400, a validation or a parse failure is never retried: nothing will differ next time.

>>> import random
>>> 1.0 <= backoff_s(3, random.Random(7)) <= 8.0
True
"""

from __future__ import annotations

import math
import random
from typing import Any

from ._errors import RateLimited, StepError

__all__ = ["ATTEMPTS_MAX", "BACKOFF_S_MAX", "RETRY_AFTER_S_MAX", "backoff_s", "classify", "parse_retry_after", "bounded_retry_after_s"]

ATTEMPTS_MAX = 5
BACKOFF_S_MAX = 32.0
BACKOFF_S_MIN = 1.0
# The longest wait a receiver's Retry-After can impose on an outbox row: a misconfigured or hostile
# receiver that asks for a week must not park an effect for a week; it is asked again within an hour.
RETRY_AFTER_S_MAX = 3600.0


def backoff_s(attempt: int, rng: random.Random, cap_s: float = BACKOFF_S_MAX) -> float:
    """Full-jitter delay before retry number ``attempt`` (1-based)."""
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")  # not a crash point: a bug guard: attempts are counted from 1
    ceiling = min(cap_s, 2.0 ** min(attempt, 62))
    return rng.uniform(BACKOFF_S_MIN, max(BACKOFF_S_MIN, ceiling))


def classify(exc: BaseException, retry_on: tuple[type[BaseException], ...] = ()) -> tuple[bool, float | None]:
    """``(retryable, retry_after_s)`` for an exception a step raised.

    Step errors say themselves; a type the step lists in ``retry_on`` is retryable; anything else
    is poison, because an unknown failure retried five times is five paid calls for nothing.
    """
    if isinstance(exc, RateLimited):
        return True, exc.retry_after_s
    if isinstance(exc, StepError):
        return exc.retryable, None
    if retry_on and isinstance(exc, retry_on):
        return True, None
    return False, None


def parse_retry_after(value: str | None, *, now: float) -> float | None:
    """The seconds a ``Retry-After`` header asks for, bounded by :data:`RETRY_AFTER_S_MAX`;
    None when it is absent or not understood (the caller then uses its normal backoff).

    Both forms of RFC 9110 are understood: delta-seconds, and an HTTP-date, counted from ``now``
    (the caller's clock, seconds since the epoch). A date in the past asks for no wait.

    >>> parse_retry_after("120", now=0.0)
    120.0
    >>> parse_retry_after("Thu, 01 Jan 1970 00:02:00 GMT", now=60.0)
    60.0
    >>> parse_retry_after("999999", now=0.0) == RETRY_AFTER_S_MAX
    True
    >>> parse_retry_after("soon", now=0.0) is None
    True
    """
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.replace(".", "", 1).isdigit():
        return bounded_retry_after_s(float(text))  # float(): an int() of 5,000 digits would raise
    import email.utils  # only for the date form: the email package is not imported with the engine

    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": a time in UTC whose source zone is unknown
        import datetime

        when = when.replace(tzinfo=datetime.timezone.utc)
    return bounded_retry_after_s(when.timestamp() - now)


def bounded_retry_after_s(seconds: Any) -> float | None:
    """``seconds`` as a wait from 0 to :data:`RETRY_AFTER_S_MAX`; None if it is not a number.

    >>> bounded_retry_after_s(-5), bounded_retry_after_s(float("inf")), bounded_retry_after_s("x")
    (0.0, 3600.0, None)
    """
    try:
        wait_s = float(seconds)
    except (TypeError, ValueError):
        return None
    if math.isnan(wait_s):
        return None
    return min(max(wait_s, 0.0), RETRY_AFTER_S_MAX)
