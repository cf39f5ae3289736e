"""How crashgate drives tinyflow: a session per worker, the tables and states declared once."""

from __future__ import annotations

from typing import Any

import newsletter
import tinyflow
from chaos.adapter import PYTHON_ERRORS
from chaos.adapters.sql import SqlSchema, SqliteAdapter


class TinyflowSession:
    def __init__(self, db: str, world: Any, worker_id: str, clock: Any, rng: Any, lease_s: float) -> None:
        self.conn, self.world, self.clock = tinyflow.connect(db), world, clock

        def model(call: tinyflow.Call, task: str, prompt: str) -> tuple[str, float]:
            reply = world.model.complete(call, task, prompt)  # the world's paid model, ledgered
            return reply.text, reply.cost_usd

        steps = newsletter.build_steps(model)
        self.engine = tinyflow.Engine(self.conn, steps, worker_id=worker_id, clock=clock.now, lease_s=lease_s, rng=rng)

    def submit(self, job_id: str, payload: Any) -> None: self.engine.submit(job_id, payload)
    def run_once(self) -> str: return self.engine.run_once()
    def send_outbox(self) -> int: return tinyflow.send_outbox(self.conn, self.world.sender.send, self.clock.now())
    def claim_only(self) -> None: self.engine.claim()
    def connection(self) -> Any: return self.conn
    def set_busy_timeout(self, seconds: float) -> None: self.conn.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")
    def close(self) -> None: self.conn.close()


class TinyflowAdapter(SqliteAdapter):
    name = "tinyflow"
    lease_s = 30.0
    schema = SqlSchema()  # the storage minimum's table and column names; no lease token
    table = tinyflow.table(newsletter.build_steps(model=None))  # type: ignore[arg-type]
    steps = [("draft", "drafting", "drafted"), ("review", "reviewing", "reviewed")]
    final = {"published": ("publish",)}
    parked = ("failed",)
    initial = ("queued",)
    submit_conflict = "first-wins"  # tinyflow keeps the first payload of an id
    fault_errors = PYTHON_ERRORS  # tinyflow retries TimeoutError and ConnectionError
    session_type = TinyflowSession

    def tasks(self) -> dict[str, str]: return {"extract": "draft", "verify": "review"}
    def payload(self, job_id: str) -> dict[str, str]: return {"topic": f"the {job_id} release"}
    def create_schema(self, conn: Any) -> None: conn.executescript(tinyflow.SCHEMA)
    def targets(self) -> dict[str, Any]: return {"worker": tinyflow.Engine.run_once, "sender": tinyflow.send_outbox}
    def trace_paths(self) -> list[str]: return [tinyflow.__file__, newsletter.__file__]

    def open(self, db: str, world: Any, *, worker_id: str, clock: Any, rng: Any) -> TinyflowSession:
        return TinyflowSession(db, world, worker_id, clock, rng, self.lease_s)


adapter = TinyflowAdapter


class ExactlyOnceTinyflowAdapter(TinyflowAdapter):
    receiver = "strict"  # as if tinyflow promised exactly-once effects: its receiver would not dedupe


strict_adapter = ExactlyOnceTinyflowAdapter
