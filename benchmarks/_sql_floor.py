"""The engine's own statements, replayed without the engine: what its SQL alone allows per commit.

Each reference job is committed exactly as the engine commits it (one worker, steps inline): a
claim (the single-statement claim and the move to the first working state), then one completion
per step (the fenced advance, the memo row and the move to the next step's working state; the last
one releases the job and adds its outbox row), each in its own ``BEGIN IMMEDIATE`` ... ``COMMIT``,
on a database the engine created, with the engine's statements and settings. The memo outputs are
the reference steps' own, computed before the clock starts. No engine code runs while it is timed:
the gap between this rate and the raw CAS commit (:mod:`benchmarks._limit`) is what the engine's
rows, indexes and pages cost SQLite; the gap between it and the engine's end-to-end commit rate is
the engine's Python.

>>> from benchmarks._measure import temp_dir
>>> with temp_dir() as d:
...     engine_sql_commits_per_s(d, jobs=5, synchronous="NORMAL") > 0
True
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from engine import SqliteStore

from ._crashgate import BareContext, workflow

__all__ = ["engine_sql_commits_per_s"]

# The engine's canonical JSON (sorted keys, no spaces, ASCII): the same text, so the same pages.
CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=True)


def engine_sql_commits_per_s(directory: str, *, jobs: int, synchronous: str) -> float:
    """Commits per second of the engine's own transactions for ``jobs`` reference jobs."""
    path = os.path.join(directory, f"sql-floor-{synchronous.lower()}-{time.monotonic_ns()}.db")
    flow = workflow()
    ids = [f"doc-{i}" for i in range(jobs)]
    outputs = {job_id: _outputs(flow, job_id) for job_id in ids}
    store = SqliteStore(path, synchronous=synchronous)
    try:
        store.submit_many([(job_id, {"source": job_id}) for job_id in ids], now=time.time())
        conn, sql, steps = store.conn, store.sql, flow.steps
        commits = 0
        started = time.perf_counter()
        for _ in ids:
            now = time.time()
            conn.execute("BEGIN IMMEDIATE")
            job_id, state, _payload, _attempts, token, _has_memos = conn.execute(
                sql.CLAIM, {"owner": "floor", "until": now + 60.0, "now": now}).fetchone()
            _changed(conn.execute(sql.FENCED_MOVE, {"id": job_id, "token": token, "now": now, "to": steps[0].working_state, "from": state}))
            conn.execute("COMMIT")
            commits += 1
            for n, step in enumerate(steps):
                output, effects = outputs[job_id][n]
                move = {"id": job_id, "token": token, "now": now, "to": step.done_state, "from": step.working_state}
                last = n == len(steps) - 1
                conn.execute("BEGIN IMMEDIATE")
                if last:
                    _changed(conn.execute(sql.COMPLETE_RELEASE, {**move, "result": output, "next_run_at": None}))
                else:
                    _changed(conn.execute(sql.COMPLETE_KEEP_LEASE_AS_IS, move))
                conn.execute(sql.INSERT_MEMO, {"id": job_id, "step": step.name, "output": output, "cost": 0.001, "now": now})
                for kind, payload in effects.items():
                    conn.execute(sql.INSERT_OUTBOX, {"id": job_id, "kind": kind, "payload": payload, "now": now})
                if not last:
                    _changed(conn.execute(sql.FENCED_MOVE, {**move, "to": steps[n + 1].working_state, "from": step.done_state}))
                conn.execute("COMMIT")
                commits += 1
        return commits / (time.perf_counter() - started)
    finally:
        store.close()


def _outputs(flow: Any, job_id: str) -> list[tuple[str, dict[str, str]]]:
    """Each reference step's output and effects for ``job_id``, as the engine stores them."""
    ctx = BareContext(job_id, {"source": job_id})
    out = []
    for step in flow.steps:
        result = step.fn(ctx)
        ctx.inputs[step.name] = result.output
        out.append((CANONICAL.encode(result.output), {kind: CANONICAL.encode(p) for kind, p in result.effects.items()}))
    return out


def _changed(cursor: Any) -> None:
    if cursor.rowcount != 1:
        raise AssertionError(f"a replayed statement changed {cursor.rowcount} rows, not 1: the replay went out of step")
