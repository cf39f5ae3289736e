"""The outbox sender: deliver committed effects at least once, with a stable idempotency key.

You cannot atomically send an email and commit a row. So a step's commit only *inserts* an outbox
row, and this separate loop delivers unsent rows and marks them. A crash between delivering and
marking re-delivers: that is at-least-once, the best possible without the receiver's help. The
sender therefore passes an idempotency key (``job_id:kind``) and the receiver dedupes on it. A
row whose kind holds ``:`` (written before kinds were checked) is never sent: its key could be
another effect's, and it is marked with a ``last_error`` that says so. A failed row waits the
full-jitter backoff, or a 429's ``Retry-After`` if that is longer (at most
:data:`~engine._retry.RETRY_AFTER_S_MAX`).
Exactly-once delivery across a network does not exist; at-least-once plus an idempotent receiver
does.

>>> from engine import FakeClock, SqliteStore
>>> class Print:
...     def send(self, key, kind, payload):
...         print(key, payload)
>>> send_outbox(SqliteStore(":memory:"), Print(), clock=FakeClock())
SendReport(sent=0, failed=0)
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Protocol

from ._clock import Clock, SystemClock
from ._errors import RateLimited, StoreBusy, StoreFailed
from ._keys import check_unambiguous_kind
from ._redact import redact_secrets
from ._retry import BACKOFF_S_MAX, backoff_s, bounded_retry_after_s
from ._store import Store

__all__ = ["Sender", "SendReport", "send_outbox", "BATCH_MAX"]

BATCH_MAX = 100


class Sender(Protocol):
    """Delivers one effect. Raise to report failure; the row is retried with backoff."""

    def send(self, key: str, kind: str, payload: Any) -> None: ...


@dataclass(frozen=True)
class SendReport:
    sent: int
    failed: int


def send_outbox(
    store: Store,
    sender: Sender,
    *,
    clock: Clock | None = None,
    rng: random.Random | None = None,
    batch_max: int = BATCH_MAX,
    backoff_s_max: float = BACKOFF_S_MAX,
) -> SendReport:
    """One pass: deliver up to ``batch_max`` due rows, then mark the delivered ones sent.

    Rows are marked in one short transaction after their sends, so the sender never holds the
    write lock while it talks to the network, and step processing is never blocked by it.
    """
    clock = clock or SystemClock()
    rng = rng or random.Random()
    now = clock.now()
    try:
        rows = store.due_outbox(now=now, limit=batch_max)
    except (StoreBusy, StoreFailed):
        return SendReport(0, 0)
    delivered: list[int] = []
    failed = 0
    for row in rows:
        try:
            sender.send(row.key, check_unambiguous_kind(row.kind), row.payload)
        except Exception as exc:  # a failed delivery is retried later, never fatal to the loop
            failed += 1
            delay_s = backoff_s(row.attempts + 1, rng, backoff_s_max)
            if isinstance(exc, RateLimited):  # the receiver's Retry-After is a minimum, bounded
                delay_s = max(delay_s, bounded_retry_after_s(exc.retry_after_s) or 0.0)
            try:
                # Redacted: any sender's error may name a url with its password or token in it.
                error = redact_secrets(f"{type(exc).__name__}: {exc}")
                store.mark_send_failed(row.id, error=error, next_at=clock.now() + delay_s)
            except (StoreBusy, StoreFailed):
                pass  # the row is simply due again at once; its backoff is lost, not the row
        else:
            delivered.append(row.id)
    try:
        store.mark_sent(delivered, now=clock.now())
    except (StoreBusy, StoreFailed):
        # Another process holds the write lock past the busy timeout, or the disk failed. The
        # rows stay unsent and are delivered again on a later pass: at-least-once, which the
        # receiver dedupes.
        return SendReport(0, failed)
    return SendReport(len(delivered), failed)
