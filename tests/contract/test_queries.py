"""The four operating queries answer where, what is stuck, what is failing and what costs."""

from engine import BadRequest, Step, StepOutput, Workflow, format_status, status


def test_the_four_queries_on_a_database_with_known_contents(store, clock, make_worker, workflow):
    store.submit_many([(f"ok-{i}", {"source": f"s{i}"}) for i in range(3)], now=clock.now())
    worker = make_worker()
    for _ in range(3):
        worker.run_once()
    clock.advance(100)
    store.submit_many([("bad-1", {}), ("bad-2", {}), ("waiting", {"source": "w"}), ("stuck", {"source": "x"})], now=clock.now())
    for _ in range(2):
        worker.run_once()  # bad-1, bad-2: no 'source' -> ValidationFailed -> failed_fetch
    starts = {s: workflow.next_step(s).working_state for s in workflow.ready_states}
    store.claim("dead-worker", now=clock.now(), lease_s=10, starts=starts)  # 'waiting' claimed, never finished
    clock.advance(50)
    report = status(store, now=clock.now(), settled_states=workflow.terminal_states | workflow.parked_states)
    by_state = {r["state"]: r for r in report["states"]}
    assert {s: r["jobs"] for s, r in by_state.items()} == {"delivered": 3, "failed_fetch": 2, "fetching": 1, "pending": 1}
    assert by_state["delivered"]["age_s_avg"] == 150
    assert by_state["pending"]["age_s_avg"] == 50
    assert [(r["id"], r["lease_owner"], r["expired_s"]) for r in report["stuck"]] == [("waiting", "dead-worker", 40)]
    assert len(report["failing"]) == 1
    assert report["failing"][0]["jobs"] == 2
    assert "ValidationFailed" in report["failing"][0]["last_error"]
    cost = {r["step"]: r for r in report["cost"]}
    assert cost["extract"]["results"] == 3
    assert cost["extract"]["cost_usd"] > 0
    assert cost["fetch"]["cost_usd"] == 0
    assert report["oldest_open"]["id"] in ("waiting", "stuck")
    assert report["oldest_open"]["age_s"] == 50
    text = format_status(report)
    assert "dead-worker" in text
    assert "which step costs the money" in text


def test_cost_outside_the_24_hour_window_is_not_counted(store, clock, make_worker):
    wf = Workflow("c", [Step("pay", lambda ctx: StepOutput({}, cost_usd=1.5))])
    store.submit("old", {}, now=clock.now())
    make_worker(wf=wf).run_once()
    clock.advance(25 * 3600)
    store.submit("new", {}, now=clock.now())
    make_worker(wf=wf).run_once()
    report = status(store, now=clock.now(), settled_states=wf.terminal_states)
    assert [(r["step"], r["results"], r["cost_usd"]) for r in report["cost"]] == [("pay", 1, 1.5)]
