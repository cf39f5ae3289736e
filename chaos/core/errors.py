"""The errors a fault of the world raises, by kind: the reference engine's, or Python's own.

A leaf of the core (it imports only the engine): the contract (:mod:`chaos.adapter`) names both
maps, and the world (:mod:`chaos.core.world`) raises from one of them.

>>> sorted(ENGINE_ERRORS) == sorted(PYTHON_ERRORS)
True
"""

from __future__ import annotations

from typing import Callable

from engine import BadRequest, ConnectionFailed, RateLimited, ServerError, StepTimeout

__all__ = ["ENGINE_ERRORS", "PYTHON_ERRORS"]


class _RateLimitedError(ConnectionError):
    """A 429 as Python's own ConnectionError, with the server's Retry-After in ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


# The errors a fault raises, by kind: the reference engine's types (what engine/ classifies) ...
ENGINE_ERRORS: dict[str, Callable[..., BaseException]] = {
    "timeout": StepTimeout,
    "connection": ConnectionFailed,
    "rate_limit": lambda message, retry_after_s=None: RateLimited(message, retry_after_s=retry_after_s),
    "server_error": lambda message: ServerError(message, 503),
    "bad_request": BadRequest,
}
# ... or Python's own, for an engine that classifies TimeoutError and ConnectionError as retryable
# and anything else (a ValueError for a 400) as poison: ``fault_errors = PYTHON_ERRORS``.
PYTHON_ERRORS: dict[str, Callable[..., BaseException]] = {
    "timeout": TimeoutError,
    "connection": ConnectionError,
    "rate_limit": _RateLimitedError,
    "server_error": ConnectionError,
    "bad_request": ValueError,
}
