"""How a job ends alone, without any fault, in a fresh database and a fresh process: what
``same-outcome`` compares a history's jobs with, and the baseline that proves a workflow ends
at all before any history runs.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any, TYPE_CHECKING

from chaos.core.clock import SharedClock
from chaos.histories.lives import CLIENT, RECOVER, Env, live
from chaos.core.invariants import Violation
from chaos.core.scenario import T0
from chaos.core.settle import settle
from chaos.core.target import default_payload
from chaos.core.world import World
from chaos.histories.databases import create, scratch_root

if TYPE_CHECKING:
    from chaos.core.target import Target

__all__ = ["run_alone", "baseline_violations"]


def baseline_violations(adapter: Target) -> list[Violation]:
    """Histories prove nothing about a workflow that fails without any fault: one job with the
    plain payload, alone in a fresh database, must reach a final state of the workflow."""
    job_id = adapter.job_ids(1)[0]
    payload = adapter.payload(job_id)
    payload_json = json.dumps(payload, sort_keys=True)
    alone = run_alone(adapter, job_id, payload_json)
    final = frozenset(adapter.final_effects())
    if alone is not None and alone[0] in final:
        return []
    hint = ("from your adapter's payload(job_id)" if adapter.payload is not default_payload
            else "the harness's default; if your steps need other input, give your adapter a payload(job_id) method that returns it")
    ended = f"ended {alone[0]!r}" if alone is not None else "could not be run"
    return [Violation("baseline", f"histories fail without any fault: job {job_id!r} with the payload {payload_json} ({hint}) "
                                  f"{ended} alone, without any fault; it should end in {' or '.join(map(repr, sorted(final)))}")]


_ALONE: dict[tuple[int, int, str, str], tuple[str, Any, dict[str, str]] | None] = {}


def run_alone(adapter: Target, job_id: str, payload_json: str) -> tuple[str, Any, dict[str, str]] | None:
    """How ``job_id`` with this payload ends alone, without any fault, in a fresh database and a
    fresh process: its state, result and applied effects (None if that run itself fails). Kept
    per process: the world's answers are deterministic."""
    key = (os.getpid(), id(adapter), job_id, payload_json)
    if key in _ALONE:
        return _ALONE[key]
    directory = tempfile.mkdtemp(prefix="alone-", dir=scratch_root())
    try:
        db = create(adapter, directory)
        clock = SharedClock(T0)
        world = World.for_adapter(directory, clock, adapter, db)
        env = Env(adapter, directory, clock, world, "alone", db=db)

        def run(e: Env) -> None:
            e.session(CLIENT).submit(job_id, json.loads(payload_json))
            settle(e.session(RECOVER), lambda: adapter.inspect(db), adapter.settled_states(), clock)

        try:
            live(env, RECOVER, run)
            job = adapter.inspect(db).jobs[job_id]
            _ALONE[key] = (job.state, job.result, {d.key: d.payload for d in world.deliveries() if d.applied})
        except Exception:  # the engine cannot even run it alone: nothing to compare with
            _ALONE[key] = None
        finally:
            world.close()
            if adapter.release is not None:  # an adapter's cached reader, if any
                adapter.release(db)
            if adapter.server is not None:
                adapter.server.drop_db(db)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return _ALONE[key]
