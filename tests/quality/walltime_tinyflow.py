"""tinyflow reading the machine's time, ``time.time()``, instead of the clock it is given, as most
engines do. Gated as it is, the harness moves a clock the engine never reads: a dead worker's
lease, computed from the machine's time, is still valid when the harness has moved past it, so
its job stays held. Declared ``time_source = "wall"``, every worker's process answers
``time.time()`` from the harness's clock, and the gate runs as on tinyflow itself.
Importable by the matrix's workers with ``examples/minimal_engine`` on the path."""

from __future__ import annotations

import time
from typing import Any

import crash
import tinyflow

HERE = __file__


def machine_time() -> float:
    return time.time()  # looked up at each call: a worker's process may point it elsewhere


class WallSession(crash.TinyflowSession):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        old = self.engine
        self.engine = tinyflow.Engine(old.conn, old.steps, worker_id=old.worker_id, clock=machine_time, lease_s=old.lease_s, rng=old.rng)

    def send_outbox(self) -> int:
        return tinyflow.send_outbox(self.conn, self.world.sender.send, machine_time())


class WallUndeclared(crash.TinyflowAdapter):
    """The engine on the machine's time, gated as if it read the clock it is passed (the default)."""

    name = "tinyflow-wall"

    def trace_paths(self) -> list[str]:
        return super().trace_paths() + [HERE]

    def open(self, db: str, world: Any, *, worker_id: str, clock: Any, rng: Any) -> WallSession:
        return WallSession(db, world, worker_id, clock, rng, self.lease_s)


class WallDeclared(WallUndeclared):
    """The same engine, declared: it reads ``time.time()``."""

    time_source = "wall"


class Sundial(WallDeclared):
    """An adapter that names a time source no engine has (a class of a module: the matrix hands it to a fresh process)."""

    time_source = "sundial"
