"""A commit whose outcome is unknown: what to tell the caller when the connection dies in COMMIT.

Before COMMIT, a lost connection means the server rolled the transaction back: nothing was
written. During COMMIT, the server may have made it durable just before the connection went:
the client cannot know which. Saying "nothing was written" then is a lie that makes a careful
operator skip a retry, so the error says what is known, and what makes a retry safe.

>>> str(commit_unknown("'jobs' on db:5432", ConnectionError("server closed the connection"))).split(";")[0]
"database 'jobs' on db:5432: the connection was lost during COMMIT (server closed the connection)"
"""

from __future__ import annotations

from ._errors import CommitUnknown

__all__ = ["commit_unknown"]


def commit_unknown(name: str, exc: BaseException) -> CommitUnknown:
    """The :class:`CommitUnknown` for database ``name``, whose COMMIT failed with ``exc``."""
    return CommitUnknown(
        f"database {name}: the connection was lost during COMMIT ({str(exc).strip()}); its outcome is unknown: "
        "it may have been written, or not. Everything the engine writes is safe to repeat: submit it again "
        "(the same id and payload give the existing job), or check with `python -m engine status`; "
        "a worker backs off and its job is taken up again once the lease expires"
    )
