"""The store's contract: what the engine asks of its database, whatever the backend.

:class:`Store` is the protocol every backend implements (:class:`~engine.SqliteStore`,
:class:`~engine.PostgresStore`; one contract-test suite runs against each). Here too are the rows
it hands back (:class:`Job`, :class:`Claim`, :class:`Memo`, :class:`OutboxRow`), the one value a
step completion commits (:class:`Completion`), and the checks of what a caller submits, which are
the same on every backend (:mod:`engine._inputs` holds them; they are re-exported here). :func:`engine.open_store` opens the store a URL names.

>>> dumps({"b": 1, "a": [1.5, None]})
'{"a":[1.5,null],"b":1}'
>>> check_job_id("")
Traceback (most recent call last):
...
engine._errors.InvalidInput: job id '' must be a non-empty string (it is the idempotency key)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Protocol

from ._errors import DamagedRow
from ._inputs import JOB_ID_CHARS_MAX, PAYLOAD_BYTES_MAX, check_job_id, dumps, loads, payload_json
from ._keys import idempotency_key

__all__ = [
    "Store", "Job", "Claim", "Completion", "Memo", "OutboxRow", "SCHEMA_VERSION", "APPLICATION_ID", "JOB_ID_CHARS_MAX",
    "PAYLOAD_BYTES_MAX", "ERROR_CHARS_MAX", "PAYLOAD_FIX", "missing_payload", "dumps", "check_job_id", "payload_json", "clip_error", "load_stored",
    "load_payload", "load_memo",
]

SCHEMA_VERSION = 2  # 2: the payload in a table of its own (engine._sql.Statements.MIGRATE_1_TO_2)
APPLICATION_ID = 0x63676174  # "cgat": marks a database as a crashgate database
ERROR_CHARS_MAX = 500
PAYLOAD_FIX = "repair the row with the payload that was submitted, then requeue the job"

@dataclass(frozen=True)
class Job:
    id: str
    workflow: str
    state: str
    payload: Any
    result: Any
    attempts: int
    next_run_at: float | None
    lease_until: float | None
    lease_owner: str | None
    lease_token: int
    last_error: str | None
    created: float
    updated: float


@dataclass(frozen=True)
class Claim:
    """A job this worker holds a lease on; ``token`` fences every write it makes.

    ``has_memos`` is whether the job had memo rows when it was claimed, if the store could tell
    exactly (None: it could not, and the worker reads them).
    """

    job_id: str
    state: str
    payload_json: str
    attempts: int
    token: int
    lease_until: float
    has_memos: bool | None = None


# Not frozen: one is built on every step, and a frozen dataclass's __init__ (object.__setattr__
# per field) costs about twice as much; nothing keeps a Completion after the commit it describes.
@dataclass(slots=True)
class Completion:
    """What one step completion commits, in ONE fenced transaction (:meth:`Store.complete`).

    The job moves ``from_state`` -> ``done_state``; the memo row (``output_json``, ``cost_usd``;
    unless ``write_memo`` is False: the memo was found, not made) and the outbox rows (``effects``:
    kind -> payload JSON) are inserted. With a ``next_state`` (the next step's working state) the
    job moves on in the same transaction and keeps the lease, renewed to ``lease_until``;
    otherwise it is released, claimable again at ``release_at`` (None: never), with
    ``result_json`` as its result.
    """

    step: str
    from_state: str
    done_state: str
    output_json: str
    now: float
    lease_until: float
    cost_usd: float = 0.0
    effects: Mapping[str, str] = field(default_factory=dict)
    next_state: str | None = None
    release_at: float | None = None
    result_json: str | None = None
    write_memo: bool = True


@dataclass(frozen=True)
class Memo:
    output: Any
    cost_usd: float
    at: float


@dataclass(frozen=True)
class OutboxRow:
    id: int
    job_id: str
    kind: str
    payload: Any
    attempts: int

    @property
    def key(self) -> str:
        """The idempotency key the receiver dedupes on: stable across re-sends."""
        return idempotency_key(self.job_id, self.kind)


class Store(Protocol):
    """The engine's database, as the worker, the sender and a person's actions use it.

    One per process, opened after any ``fork``, never shared. Every write a worker makes after its
    claim is fenced by the claim's lease token: a worker whose lease was taken over changes
    nothing, and the write answers False. A database that cannot take a write now raises
    :class:`~engine.StoreBusy` (locked) or :class:`~engine.StoreFailed` (the machine failed),
    having written nothing.
    """

    busy_timeout_s: float

    def close(self) -> None: ...

    def claim_plan(self) -> str:
        """The claim query's plan as the database reports it (it must use the ``job_due`` index)."""

    def submit(self, job_id: str, payload: Any, *, now: float) -> Job:
        """Create a job, or return the existing one if ``job_id`` was submitted with this payload."""

    def submit_many(self, items: Iterable[tuple[str, Any]], *, now: float) -> list[Job]:
        """Submit many jobs in one transaction: all are stored, or (on any error) none."""

    def get(self, job_id: str) -> Job: ...

    def jobs(self) -> list[Job]: ...

    def claim(self, owner: str, *, now: float, lease_s: float, starts: Mapping[str, str]) -> Claim | None:
        """Lease the most overdue claimable job and start its step, in ONE write transaction."""

    def complete(self, claim: Claim, completion: Completion) -> bool:
        """Commit a step's memo, outbox rows and state advance together; False if the lease was lost."""

    def park(
        self, claim: Claim, *, from_state: str, to_state: str, attempts: int, error: str,
        next_run_at: float | None, now: float,
    ) -> bool:
        """Leave the working state without a result (retry edge, failed state or needs_human)."""

    def heartbeat(self, claim: Claim, *, state: str, until: float, now: float) -> bool:
        """Extend the lease; False means it was taken over and the worker must stop."""

    def human_move(self, job_id: str, *, from_state: str, to_state: str, next_run_at: float | None, now: float) -> bool:
        """A person's action: a compare-and-swap on the state, not fenced by any lease."""

    def memo(self, job_id: str, step: str) -> Memo | None: ...

    def memos(self, job_id: str) -> dict[str, Any]: ...

    def due_outbox(self, *, now: float, limit: int) -> list[OutboxRow]: ...

    def mark_sent(self, ids: list[int], *, now: float) -> int:
        """Mark delivered rows; only ever called after the sender confirmed each delivery."""

    def mark_send_failed(self, row_id: int, *, error: str, next_at: float) -> None: ...

    def status(self, *, now: float, settled_states: frozenset[str] | set[str]) -> dict[str, Any]:
        """The operating queries' rows (see :func:`engine.status`)."""


def clip_error(error: str) -> str:
    """An error message both databases can store as ``last_error``, short enough: a NUL or a lone
    surrogate it quotes from the input (a key, a value) is written as its escape.

    >>> clip_error("bad key 'a\\x00b\\udc80'")
    "bad key 'a\\\\x00b\\\\udc80'"
    """
    error = error.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
    if len(error) <= ERROR_CHARS_MAX:
        return error
    return error[: ERROR_CHARS_MAX - 3] + "..."


def load_stored(text: str, job_id: str, what: str, fix: str) -> Any:
    """Parse JSON the engine wrote itself; anything else is a damaged row (DamagedRow)."""
    try:
        return loads(text)
    except ValueError as exc:
        raise DamagedRow(job_id, what, str(exc), fix) from None


def missing_payload(job_id: str) -> DamagedRow:
    """What a job whose payload row is gone (deleted by hand, or a damaged file) is quarantined with."""
    return DamagedRow(job_id, "payload", "job_payload has no row for it", f"insert the payload that was submitted "
                      f"(INSERT INTO job_payload (job_id, payload) VALUES ({job_id!r}, '<its JSON>')), then requeue the job",
                      problem="is missing")


def load_payload(job_id: str, text: str | None) -> Any:
    # load_stored, written out: every step of a claim parses its job's payload afresh.
    if text is None:  # the job's row in job_payload is gone: deleted by hand, or a damaged file
        raise missing_payload(job_id)
    try:
        return loads(text)
    except ValueError as exc:
        raise DamagedRow(job_id, "payload", str(exc), PAYLOAD_FIX) from None


def load_memo(job_id: str, step: str, text: str) -> Any:
    return load_stored(
        text,
        job_id,
        f"memo row of step {step!r}",
        f"delete that row (DELETE FROM step_result WHERE job_id = {job_id!r} AND step = {step!r}) so that the step "
        "runs again, then requeue the job",
    )
