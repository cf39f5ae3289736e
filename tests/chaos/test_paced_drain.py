"""A paced drain (a storm's: the clock moved only to the first retry due) gives up on a job stuck
for good after as many still rounds as an unpaced drain runs, not after the storm's bound: a
message that a dead consumer locked forever cost each such scenario 400 rounds, each reading
every row of the engine. A paced drain that still makes progress keeps its whole bound."""

from __future__ import annotations

from dataclasses import dataclass

from chaos.adapter import JobView, Snapshot
from chaos.core.settle import PACED_ROUNDS_MAX, RECOVERY_ROUNDS_MAX, STILL_ROUNDS_MAX, settle

SETTLED = frozenset({"delivered"})


@dataclass
class Clock:
    t: float = 1_700_000_000.0

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class Engine:
    """Jobs that each need ``steps`` worker iterations, one a round; ``stuck`` never moves (its
    message locked by a consumer that died: no lease, no backoff the harness can see)."""

    def __init__(self, steps: int, stuck: bool = False) -> None:
        self.left, self.stuck, self.inspected = steps, stuck, 0

    def run_once(self) -> str:
        if self.left and not self.stuck:
            self.left -= 1
            return "idle"  # one step a round: the round ends
        return "idle"

    def send_outbox(self) -> int:
        return 0

    def inspect(self) -> Snapshot:
        self.inspected += 1
        state = "delivered" if self.left == 0 else f"step-{self.left}:working"
        return Snapshot(jobs={"doc-1": JobView(state, "{}", None, None, None)})


def test_a_paced_drain_gives_up_on_a_job_stuck_for_good_after_an_unpaced_drains_rounds():
    engine = Engine(steps=5, stuck=True)
    _, crashes, done = settle(engine, engine.inspect, SETTLED, Clock(), paced=True)
    assert not done and crashes == []
    # The first round's view is compared with none; then STILL_ROUNDS_MAX rounds that changed nothing.
    assert engine.inspected == STILL_ROUNDS_MAX + 1 < PACED_ROUNDS_MAX, engine.inspected


def test_a_paced_drain_that_makes_progress_keeps_its_whole_bound():
    steps = RECOVERY_ROUNDS_MAX * 3  # far past an unpaced drain's rounds, each one changing the job
    engine = Engine(steps=steps)
    _, _, done = settle(engine, engine.inspect, SETTLED, Clock(), paced=True)
    assert done and engine.inspected == steps, engine.inspected
