"""The jobs a scenario submits are the adapter's: ``job_ids(n)`` names them and ``payload(job_id)``
fills them, so that an orders project's findings speak of ``order-1001``, not of ``doc-1``.

Method: the orders example (examples/orders, whose adapter names its jobs ``order-1001`` ..) run
through the crash matrix with a planted promise it cannot keep (a strict receiver: exactly-once
delivery, which an outbox cannot give), so that a finding names an effect key; the families that
name a job in their setup or phase (a damaged payload, a person's cancel) must act on the
adapter's job, or they would be skipped or refused. The reference adapter keeps ``doc-1``.
"""

from __future__ import annotations

import json
import os

import pytest

from chaos import ReferenceAdapter
from chaos.adapter import describe_capabilities, job_ids_for, resolve_jobs
from chaos.core.scenario import for_adapter
from chaos.core.target import resolve
from chaos.matrix.families import reference_scenarios
from chaos.matrix.runner import run_matrix
from chaos.plans.plan import PlanError, check_against, parse_plan

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")

STRICT_ORDERS = '''
from orders.crash import OrdersAdapter


class StrictOrders(OrdersAdapter):
    receiver = "strict"  # planted: it promises exactly-once effects, which an outbox cannot give
'''


@pytest.fixture
def orders(monkeypatch: pytest.MonkeyPatch, tmp_path) -> str:
    monkeypatch.syspath_prepend(EXAMPLES)
    (tmp_path / "strict_orders.py").write_text(STRICT_ORDERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "strict_orders:StrictOrders"


def test_a_finding_on_an_orders_adapter_names_its_own_job_ids(orders):
    report = run_matrix(orders, families=["sender", "damaged-payload", "cancel-too-late"])
    details = [v.detail for r in report.results for v in r.outcome.violations]
    assert any(d.startswith("effect 'order-1001:receipt' was applied 2 times at the receiver (job 'order-1001'") for d in details), details[:3]
    assert not report.skipped, report.skipped  # the damage and the cancel found the job they name
    for family in ("damaged-payload", "cancel-too-late"):
        ends = {job for r in report.results if r.family == family for job in r.outcome.final_states}
        assert ends == {"order-1001"}, (family, ends)
    assert "doc-1" not in json.dumps(report.to_json())


def test_the_reference_adapter_and_an_adapter_without_the_hook_keep_doc_1():
    class Bare:
        name = "bare"

    assert job_ids_for(ReferenceAdapter(), 3) == ("doc-1", "doc-2", "doc-3")
    assert job_ids_for(Bare(), 2) == ("doc-1", "doc-2")  # type: ignore[arg-type]
    named = [for_adapter(s, resolve(ReferenceAdapter())) for s in reference_scenarios()]
    assert {s.name: s.setup for s in named}["damaged-payload"] == ("damage:payload:doc-1",)
    assert {s.name: s.phase for s in named}["cancel-race"] == "human:cancel:doc-1"
    assert {s.name: s.jobs for s in named}["retry-storm"] == tuple(f"doc-{n}" for n in range(1, 17))
    assert not any("<job" in "".join((*s.jobs, *s.setup, s.phase)) for s in named)


def test_job_ids_that_are_not_n_distinct_strings_are_refused_naming_the_adapter():
    class Twice(ReferenceAdapter):
        name = "twice"

        def job_ids(self, n: int) -> list[str]:
            return ["order-1"] * n

    with pytest.raises(ValueError, match=r"^adapter 'twice': job_ids\(2\) returned \['order-1', 'order-1'\]; return 2 distinct"):
        resolve_jobs("damage:payload:<job 2>", Twice())


def test_the_capability_list_names_the_job_ids_hook_and_its_default():
    class Bare(ReferenceAdapter):
        job_ids = None  # type: ignore[assignment]

    lines = describe_capabilities(Bare(), missing_only=True)
    assert "  no   job_ids: default: doc-1 .. doc-n; offer job_ids(n) -> the first n job ids to submit" in "\n".join(lines)


def test_a_plans_default_jobs_are_the_targets_and_its_expectations_are_checked_against_them(orders):
    from orders.crash import OrdersAdapter

    plan = parse_plan({"lesson": "L.", "scenario": [{"name": "s", "script": [{"drain": True}],
                                                     "expect": {"states": {"order-1001": "receipt_done"}}}]}, "p.toml")
    check_against(plan, OrdersAdapter())  # the default job is the orders adapter's first
    with pytest.raises(PlanError, match=r"names job 'order-1001', which is never submitted; submitted: doc-1$"):
        check_against(plan, ReferenceAdapter())


def test_a_history_on_an_orders_adapter_submits_its_own_job_ids_and_a_finding_names_one(orders, history):
    """Random histories draw their submits and a person's actions from the adapter's ids, so a
    history of the orders example submits order-1001 .., and a re-delivery its strict receiver
    refuses is named by the order's effect key."""
    from hypothesis import Phase, settings
    from hypothesis.stateful import run_state_machine_as_test

    from chaos.adapter import load_adapter
    from chaos.histories.events import Human, Send, Storm, Submit
    from chaos.histories.events import KillAfterDelivery, Run
    from chaos.histories.state_machine import InvariantViolated, machine_for

    adapter = load_adapter(orders)
    drawn: list = []

    class Recorded(machine_for(adapter)):  # type: ignore[misc, valid-type]
        def _step(self, event):
            drawn.append(event)
            if isinstance(event, Storm):  # sixteen jobs drained: costly, and not what is tested here
                return
            super()._step(event)

    run_state_machine_as_test(Recorded, settings=settings(max_examples=12, stateful_step_count=6, phases=[Phase.generate],
                                                          deadline=None, database=None, derandomize=True))
    named = {e.job for e in drawn if isinstance(e, (Submit, Human))}
    assert named and named <= {f"order-{n}" for n in range(1001, 1006)}, drawn
    assert Recorded.storm_jobs[0] == "order-1006" and len(Recorded.storm_jobs) == 16

    machine = history(adapter, jobs=2)
    assert set(machine.submitted) == {"order-1001", "order-1002"}
    for _ in range(8):
        machine._step(Run("w1"))
    machine._step(Send(KillAfterDelivery(1, "fork")))
    machine._step(Send())
    with pytest.raises(InvariantViolated) as caught:
        machine.every_invariant_holds_now()
    assert "effect 'order-1001:receipt' was applied 2 times at the receiver (job 'order-1001', sent from " in str(caught.value)
    assert "doc-" not in str(caught.value)


def test_a_history_on_the_reference_adapter_keeps_doc_1_to_doc_5(history):
    from chaos.histories.state_machine import machine_for

    histories = machine_for(ReferenceAdapter())
    assert histories.jobs == ("doc-1", "doc-2", "doc-3", "doc-4", "doc-5")
    assert histories.storm_jobs == tuple(f"doc-{n}" for n in range(6, 22))
    assert set(history(jobs=3).submitted) == {"doc-1", "doc-2", "doc-3"}
