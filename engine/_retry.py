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

import random

from ._errors import RateLimited, StepError

__all__ = ["ATTEMPTS_MAX", "BACKOFF_S_MAX", "backoff_s", "classify"]

ATTEMPTS_MAX = 5
BACKOFF_S_MAX = 32.0
BACKOFF_S_MIN = 1.0


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
