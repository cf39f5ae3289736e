"""The four operating queries: where is everything, what is stuck, what is failing, what costs.

Alert on the *oldest job in a non-terminal state*, not on throughput: a state whose count and age
both rise is a stalled stage. At low volume, alert on any row in a failed state.

>>> from engine import SqliteStore
>>> status(SqliteStore(":memory:"), now=0.0, settled_states={"delivered"})["states"]
[]
"""

from __future__ import annotations

import math
from typing import Any

from ._redact import redact_secrets
from ._sql import SQLITE, Statements
from ._store import Store
from .terminal import printable

__all__ = ["status", "format_status", "STATUS_QUERIES"]

SQLITE_STATEMENTS = Statements().rendered(SQLITE)

# The four queries as SQLite writes them, for a reader who runs them by hand (sqlite3 jobs.db);
# the store runs them in its own dialect (see engine._sql).
STATUS_QUERIES = {
    "where is everything": SQLITE_STATEMENTS.WHERE_IS_EVERYTHING,
    "what is stuck": SQLITE_STATEMENTS.WHAT_IS_STUCK,
    "what is failing": SQLITE_STATEMENTS.WHAT_IS_FAILING,
    "which step costs the money": SQLITE_STATEMENTS.WHICH_STEP_COSTS,
}


def status(store: Store, *, now: float, settled_states: frozenset[str] | set[str]) -> dict[str, Any]:
    """Run the four queries, and find the oldest job not in one of ``settled_states``, as data.

    A number that is not finite is None (JSON's null): each step's cost is finite when it is
    stored, but their sum can pass the largest float and become infinity, which ``json.dumps``
    writes as ``Infinity``, text that no JSON reader accepts. Errors are shown redacted: a row
    stored before urls were redacted may still hold a password.
    """
    report = store.status(now=now, settled_states=settled_states)
    for key in ("failing", "outbox_failing"):
        for row in report.get(key, ()):
            if isinstance(row.get("last_error"), str):
                row["last_error"] = redact_secrets(row["last_error"])
    return _finite(report)


def _finite(value: Any) -> Any:
    """``value`` with every float that is not finite (inf, NaN) replaced by None, at any depth.

    >>> _finite({"cost": [{"cost_usd": float("inf"), "results": 2}], "age_s": 1.5})
    {'cost': [{'cost_usd': None, 'results': 2}], 'age_s': 1.5}
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def format_status(report: dict[str, Any]) -> str:
    """The status report as text a person reads in a terminal."""
    out = ["where is everything (jobs per state, average and oldest age)"]
    if not report["states"]:
        out.append("  (no jobs)")
    # Every text from the database goes through printable(): an id or an error holding escape
    # sequences must not clear the screen or fake the lines around it.
    p = printable
    for row in report["states"]:
        out.append(f"  {p(row['state']):<16} {row['jobs']:>7}  avg {_age(row['age_s_avg'])}  max {_age(row['age_s_max'])}")
    out.append("what is stuck (leases expired, not yet taken over)")
    out += [f"  {p(r['id']):<24} {p(r['state']):<14} owner {p(r['lease_owner'])}  expired {_age(r['expired_s'])} ago" for r in report["stuck"]] or ["  nothing"]
    out.append("what is failing (last_error, grouped)")
    failing = [f"  {r['jobs']:>6} x {p(r['state']):<14} {p(r['last_error'])}" for r in report["failing"]]
    failing += [f"  {r['rows']:>6} x outbox {p(r['kind']):<7} {p(r['last_error'])} (effect not delivered yet)" for r in report.get("outbox_failing", ())]
    out += failing or ["  nothing"]
    out.append("which step costs the money (last 24 h)")
    out += [_cost_line(r) for r in report["cost"]] or ["  nothing yet"]
    oldest = report["oldest_open"]
    out.append(
        "oldest job still in flight (alert on this): "
        + (f"{p(oldest['id'])} ({p(oldest['state'])}, {_age(oldest['age_s'])} old)" if oldest else "none")
    )
    return "\n".join(out)


def _cost_line(row: dict[str, Any]) -> str:
    """One step's cost; None is a sum that passed the largest float (see :func:`status`)."""
    head = f"  {printable(row['step']):<12} {row['results']:>7} results  "
    if row["cost_usd"] is None or row["cost_usd_avg"] is None:
        return head + "cost beyond the largest float: check the cost_usd this step reports"
    return head + f"${row['cost_usd']:.4f}  avg ${row['cost_usd_avg']:.6f}"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"
