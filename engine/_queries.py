"""The four operating queries: where is everything, what is stuck, what is failing, what costs.

Alert on the *oldest job in a non-terminal state*, not on throughput: a state whose count and age
both rise is a stalled stage. At low volume, alert on any row in a failed state.

>>> from engine import SqliteStore
>>> status(SqliteStore(":memory:"), now=0.0, settled_states={"delivered"})["states"]
[]
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from ._errors import StoreFailed
from ._terminal import printable

__all__ = ["status", "format_status", "STATUS_QUERIES"]

COST_WINDOW_S = 24 * 3600
STUCK_ROWS_MAX = 50
ERROR_ROWS_MAX = 20

WHERE_IS_EVERYTHING = (
    "SELECT state, COUNT(*) AS jobs, AVG(:now - created) AS age_s_avg, MAX(:now - created) AS age_s_max "
    "FROM job GROUP BY state ORDER BY state"
)
WHAT_IS_STUCK = (
    "SELECT id, state, lease_owner, :now - lease_until AS expired_s FROM job "
    "WHERE lease_until IS NOT NULL AND lease_until < :now ORDER BY lease_until LIMIT :limit"
)
WHAT_IS_FAILING = (
    "SELECT state, last_error, COUNT(*) AS jobs FROM job WHERE last_error IS NOT NULL "
    "GROUP BY state, last_error ORDER BY jobs DESC, state LIMIT :limit"
)
# Effects the outbox could not deliver yet: a job reads "delivered" while its effect is retried, so
# "what is failing" must show these rows too, not only the jobs' last_error.
WHAT_IS_UNDELIVERED = (
    "SELECT kind, last_error, COUNT(*) AS rows FROM outbox WHERE sent_at IS NULL AND last_error IS NOT NULL "
    "GROUP BY kind, last_error ORDER BY rows DESC, kind LIMIT :limit"
)
WHICH_STEP_COSTS = (
    "SELECT step, COUNT(*) AS results, SUM(cost) AS cost_usd, AVG(cost) AS cost_usd_avg FROM step_result "
    "WHERE at >= :since GROUP BY step ORDER BY cost_usd DESC, step"
)
# Jobs that should still move on their own: neither finished nor parked for a human.
OLDEST_OPEN = (
    "SELECT id, state, :now - created AS age_s FROM job "
    "WHERE state NOT IN (SELECT value FROM json_each(:settled)) ORDER BY created, id LIMIT 1"
)
STATUS_QUERIES = {
    "where is everything": WHERE_IS_EVERYTHING,
    "what is stuck": WHAT_IS_STUCK,
    "what is failing": WHAT_IS_FAILING,
    "which step costs the money": WHICH_STEP_COSTS,
}

# The same five queries for PostgreSQL: the same text but for psycopg's %(name)s parameters and an
# array in place of SQLite's json_each. The contract tests run both on the same known contents.
PG_WHERE_IS_EVERYTHING = (
    "SELECT state, COUNT(*) AS jobs, AVG(%(now)s - created) AS age_s_avg, MAX(%(now)s - created) AS age_s_max "
    "FROM job GROUP BY state ORDER BY state"
)
PG_WHAT_IS_STUCK = (
    "SELECT id, state, lease_owner, %(now)s - lease_until AS expired_s FROM job "
    "WHERE lease_until IS NOT NULL AND lease_until < %(now)s ORDER BY lease_until LIMIT %(limit)s"
)
PG_WHAT_IS_FAILING = (
    "SELECT state, last_error, COUNT(*) AS jobs FROM job WHERE last_error IS NOT NULL "
    "GROUP BY state, last_error ORDER BY jobs DESC, state LIMIT %(limit)s"
)
PG_WHAT_IS_UNDELIVERED = (
    "SELECT kind, last_error, COUNT(*) AS rows FROM outbox WHERE sent_at IS NULL AND last_error IS NOT NULL "
    "GROUP BY kind, last_error ORDER BY rows DESC, kind LIMIT %(limit)s"
)
PG_WHICH_STEP_COSTS = (
    "SELECT step, COUNT(*) AS results, SUM(cost) AS cost_usd, AVG(cost) AS cost_usd_avg FROM step_result "
    "WHERE at >= %(since)s GROUP BY step ORDER BY cost_usd DESC, step"
)
PG_OLDEST_OPEN = (
    "SELECT id, state, %(now)s - created AS age_s FROM job "
    "WHERE NOT (state = ANY(%(settled)s)) ORDER BY created, id LIMIT 1"
)
_DIALECTS = {
    "sqlite": (WHERE_IS_EVERYTHING, WHAT_IS_STUCK, WHAT_IS_FAILING, WHICH_STEP_COSTS, OLDEST_OPEN, WHAT_IS_UNDELIVERED),
    "postgresql": (
        PG_WHERE_IS_EVERYTHING, PG_WHAT_IS_STUCK, PG_WHAT_IS_FAILING, PG_WHICH_STEP_COSTS, PG_OLDEST_OPEN, PG_WHAT_IS_UNDELIVERED,
    ),
}


def status(store: Any, *, now: float, settled_states: frozenset[str] | set[str]) -> dict[str, Any]:
    """Run the four queries, and find the oldest job not in one of ``settled_states``, as data."""
    where, stuck, failing, costs, oldest_open, undelivered = _DIALECTS[store.backend]
    params = {"now": now, "limit": STUCK_ROWS_MAX, "since": now - COST_WINDOW_S}
    settled = sorted(settled_states)
    oldest = _rows(store, oldest_open, {"now": now, "settled": json.dumps(settled) if store.backend == "sqlite" else settled})
    return {
        "states": _rows(store, where, params),
        "stuck": _rows(store, stuck, params),
        "failing": _rows(store, failing, {**params, "limit": ERROR_ROWS_MAX}),
        "outbox_failing": _rows(store, undelivered, {"limit": ERROR_ROWS_MAX}),
        "cost": _rows(store, costs, params),
        "oldest_open": oldest[0] if oldest else None,
    }


def _rows(store: Any, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows as dicts, through the store's own DB-API connection (sqlite3 or psycopg).

    A failure of the database under it (an I/O error, a damaged file, a lost server) is raised as
    :class:`StoreFailed`, as the store's own reads are; a bug in a query is not caught.
    """
    try:
        cursor = store.conn.execute(sql, params)
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]
    except _database_errors(store) as exc:
        if isinstance(exc, (sqlite3.ProgrammingError, sqlite3.IntegrityError)):
            raise
        name = getattr(store, "name", None) or repr(getattr(store, "path", "?"))
        raise StoreFailed(
            f"database {name}: a status query failed ({type(exc).__name__}: {str(exc).strip()}); nothing was changed: "
            "check the device (or that the server runs) and try again"
        ) from exc


def _database_errors(store: Any) -> tuple[type[BaseException], ...]:
    if store.backend == "sqlite":
        return (sqlite3.DatabaseError,)
    import psycopg  # a PostgreSQL store exists, so psycopg is installed

    return (psycopg.OperationalError,)


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
    out += [f"  {p(r['step']):<12} {r['results']:>7} results  ${r['cost_usd']:.4f}  avg ${r['cost_usd_avg']:.6f}" for r in report["cost"]] or ["  nothing yet"]
    oldest = report["oldest_open"]
    out.append(
        "oldest job still in flight (alert on this): "
        + (f"{p(oldest['id'])} ({p(oldest['state'])}, {_age(oldest['age_s'])} old)" if oldest else "none")
    )
    return "\n".join(out)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"
