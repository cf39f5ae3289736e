"""Planted bugs of tests/quality/variants.py re-expressed on PostgreSQL.

Each is :class:`~chaos._pgadapter.PostgresReferenceAdapter` broken the same way as its SQLite
twin, so the crash matrix on PostgreSQL must catch it with the same invariant.
"""

from __future__ import annotations

import os
from typing import Any

from chaos._pgadapter import PostgresReferenceAdapter
from engine import PostgresStore
from engine._postgres import INSERT_MEMO, INSERT_OUTBOX
try:
    from quality import variants as sqlite_variants  # as pytest imports it (tests/ on sys.path)
except ImportError:  # python -m chaos matrix --target tests.pg_matrix.variants:SplitMemo --db ...
    from tests.quality import variants as sqlite_variants

HERE = os.path.abspath(__file__)


class _Variant(PostgresReferenceAdapter):
    """A PostgreSQL reference adapter whose planted code is traced for crash points too."""

    catches: tuple[str, ...] = ()
    families: tuple[str, ...] = ()

    def trace_paths(self) -> list[str]:
        return super().trace_paths() + [HERE, sqlite_variants.HERE]


class _AdvanceThenMemoStore(PostgresStore):
    def complete(self, claim: Any, **kw: Any) -> bool:
        if not super().complete(claim, **{**kw, "effects": {}, "write_memo": False}):
            return False
        with self._write() as conn:  # BUG: a second transaction
            if kw["write_memo"]:
                conn.execute(INSERT_MEMO, {"id": claim.job_id, "step": kw["step"], "output": kw["output_json"], "cost": kw["cost_usd"], "now": kw["now"]})
                for kind, payload_json in kw["effects"].items():
                    conn.execute(INSERT_OUTBOX, {"id": claim.job_id, "kind": kind, "payload": payload_json, "now": kw["now"]})
        return True


class SplitMemo(_Variant):
    """The memo committed in a second transaction after the state advance (SplitMemo on SQLite).
    Caught by **progress-recorded**."""

    catches = ("progress-recorded",)
    families = ("clean",)
    bug_line = "with self._write() as conn:  # BUG: a second transaction"

    def make_store(self, db_path: str) -> PostgresStore:  # type: ignore[override]
        return _AdvanceThenMemoStore(db_path)


class MarkBeforeSend(_Variant):
    """The outbox row marked sent before it is sent (MarkBeforeSend on SQLite). Caught by
    **outbox-at-least-once**."""

    catches = ("outbox-at-least-once",)
    families = ("sender",)
    bug_line = "for row in rows:"

    def send_outbox_fn(self) -> Any:
        return sqlite_variants._mark_then_send


PLANTED = (SplitMemo, MarkBeforeSend)
