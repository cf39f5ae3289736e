"""crashgate's reference durable-workflow engine, on SQLite (standard library only) or PostgreSQL.

>>> from engine import FakeClock, SqliteStore, Worker, reference_workflow, LocalModel, GeneratedDocuments
>>> store = SqliteStore(":memory:")
>>> wf = reference_workflow(LocalModel(), GeneratedDocuments())
>>> store.submit("doc-1", {"source": "doc-1"}, now=0.0).state
'pending'
>>> Worker(store, wf, clock=FakeClock(0.0), threaded=False).run_once().state
'delivered'
"""

from ._clock import Clock, FakeClock, SystemClock
from ._errors import (
    BadRequest, CommitUnknown, ConnectionFailed, DamagedRow, EngineError, IdempotencyConflict, IllegalAction, IllegalTransition,
    InvalidInput, LeaseLost, ParseFailed, PoisonError, RateLimited, RetryableError, SchemaMismatch, ServerError,
    StepError, StepTimeout, StoreBusy, StoreFailed, UnknownJob, ValidationFailed,
)
from ._http import HttpSender, decode_idempotency_key, encode_idempotency_key
from ._human import RESOLUTIONS, cancel, requeue, resolve
from ._keys import EFFECT_KIND_PATTERN, idempotency_key, split_idempotency_key
from ._lease import LEASE_S_MAX, LeasePolicy
from ._open import open_store
from ._outbox import SendReport, Sender, send_outbox
from ._outcome import NO_PROGRESS, STORE_UNAVAILABLE, Outcome
from ._postgres import PostgresStore
from ._queries import format_status, status
from ._reference import (
    REFERENCE_STATES, Documents, GeneratedDocuments, LocalModel, Model, ModelReply, generated_document, local_answer, reference_workflow,
)
from ._replay import ReplayResult, replay
from ._retry import ATTEMPTS_MAX, BACKOFF_S_MAX, RETRY_AFTER_S_MAX, backoff_s, classify
from ._sqlite import SqliteStore
from ._sqlstore import SqlStore
from ._store import Claim, Completion, Job, Memo, OutboxRow, Store
from ._worker import RunResult, StepContext, Worker
from ._workflow import CANCELLED, NEEDS_HUMAN, PENDING, NeedsHuman, Step, StepOutput, Workflow

__all__ = [
    "ATTEMPTS_MAX", "BACKOFF_S_MAX", "BadRequest", "CANCELLED", "Claim", "Clock", "CommitUnknown", "Completion", "ConnectionFailed",
    "DamagedRow", "Documents", "EFFECT_KIND_PATTERN", "EngineError", "FakeClock", "GeneratedDocuments", "HttpSender",
    "IdempotencyConflict", "IllegalAction", "IllegalTransition", "InvalidInput", "Job", "LEASE_S_MAX", "LeaseLost", "LeasePolicy",
    "LocalModel", "Memo", "Model", "ModelReply", "NEEDS_HUMAN", "NO_PROGRESS", "NeedsHuman", "OutboxRow", "Outcome",
    "PENDING", "ParseFailed", "PoisonError", "PostgresStore", "REFERENCE_STATES", "RESOLUTIONS", "RETRY_AFTER_S_MAX", "RateLimited",
    "ReplayResult", "RetryableError", "RunResult", "STORE_UNAVAILABLE", "SchemaMismatch", "SendReport", "Sender",
    "ServerError", "SqlStore", "SqliteStore", "Step", "StepContext", "StepError", "StepOutput", "StepTimeout",
    "Store", "StoreBusy", "StoreFailed", "SystemClock", "UnknownJob", "ValidationFailed", "Worker", "Workflow",
    "backoff_s", "cancel", "classify", "decode_idempotency_key", "default_workflow", "encode_idempotency_key", "format_status", "generated_document",
    "idempotency_key", "local_answer", "open_store", "reference_workflow",
    "replay", "requeue", "resolve", "send_outbox", "split_idempotency_key", "status",
]


def default_workflow() -> Workflow:
    """The reference workflow on the offline model and generated documents (what the CLI uses)."""
    return reference_workflow(LocalModel(), GeneratedDocuments())
