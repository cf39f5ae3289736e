"""Claims are short leases with a fencing token: a dead worker frees its job, a zombie writes nothing."""

import threading
import time

import pytest

from engine import InvalidInput, Step, Workflow


def starts(workflow):
    return {s: workflow.next_step(s).working_state for s in workflow.ready_states}


def test_a_claim_moves_the_job_into_its_first_working_state_and_takes_a_lease(store, workflow, clock):
    store.submit("doc-1", {"source": "a"}, now=clock.now())
    claim = store.claim("w1", now=clock.now(), lease_s=60, starts=starts(workflow))
    job = store.get("doc-1")
    assert (claim.state, job.state) == ("fetching", "fetching")
    assert (job.lease_owner, job.lease_until, job.lease_token) == ("w1", clock.now() + 60, 1)


def test_two_connections_racing_for_one_job_get_it_once(open_db, store, workflow, clock):
    store.submit("doc-1", {"source": "a"}, now=clock.now())
    other = open_db()
    first = store.claim("w1", now=clock.now(), lease_s=60, starts=starts(workflow))
    second = other.claim("w2", now=clock.now(), lease_s=60, starts=starts(workflow))
    assert first is not None
    assert second is None


def test_an_expired_lease_is_taken_over_with_a_new_token_and_counts_an_attempt(open_db, store, workflow, clock):
    store.submit("doc-1", {"source": "a"}, now=clock.now())
    first = store.claim("w1", now=clock.now(), lease_s=60, starts=starts(workflow))
    clock.advance(59)
    assert store.claim("w2", now=clock.now(), lease_s=60, starts=starts(workflow)) is None
    clock.advance(2)
    second = open_db().claim("w2", now=clock.now(), lease_s=60, starts=starts(workflow))
    assert second.job_id == "doc-1"
    assert second.state == "fetching"  # it resumes the step the dead worker was in
    assert second.token == first.token + 1
    assert second.attempts == 1


def test_a_zombie_whose_lease_was_taken_over_commits_nothing(store, workflow, clock):
    store.submit("doc-1", {"source": "a"}, now=clock.now())
    zombie = store.claim("w1", now=clock.now(), lease_s=60, starts=starts(workflow))
    clock.advance(61)
    store.claim("w2", now=clock.now(), lease_s=60, starts=starts(workflow))
    ok = store.complete(
        zombie, step="fetch", from_state="fetching", done_state="fetched", output_json='{"text":"x"}', cost_usd=1.0,
        effects={"delivery": "{}"}, next_state="extracting", release_at=None, lease_until=clock.now() + 60,
        result_json=None, write_memo=True, now=clock.now(),
    )
    assert ok is False
    assert store.memos("doc-1") == {}
    assert store.conn.execute("SELECT COUNT(*) FROM outbox").fetchone()[0] == 0
    assert store.get("doc-1").state == "fetching"
    assert store.get("doc-1").lease_owner == "w2"
    assert store.heartbeat(zombie, state="fetching", until=clock.now() + 60, now=clock.now()) is False
    assert store.park(zombie, from_state="fetching", to_state="pending", attempts=1, error="x", next_run_at=0, now=clock.now()) is False


def test_the_claim_query_reads_one_index_entry_whatever_the_backlog(store, backend):
    plan = store.claim_plan()
    assert "job_due" in plan
    assert not backend.claim_scans_everything(plan), plan


def test_a_step_heartbeat_keeps_the_lease_while_a_long_step_runs(store, clock, make_worker):
    def slow(ctx):
        for _ in range(6):  # 6 x 30 s = 180 s against a 60 s lease
            clock.advance(30)
            ctx.heartbeat()
        return {"ok": True}

    wf = Workflow("slow", [Step("slow", slow, timeout_s=200)])
    store.submit("j", {}, now=clock.now())
    worker = make_worker(wf=wf, lease_s=240)
    result = worker.run_once()
    assert result.outcome == "done"


def test_a_heartbeat_after_a_takeover_raises_lease_lost_and_the_zombie_stops(open_db, store, clock, make_worker):
    calls = []

    def slow(ctx):
        calls.append(ctx.worker_id)
        if ctx.worker_id == "w1":
            clock.advance(100)  # frozen past the 60 s lease: w2 takes over meanwhile
            thief = make_worker("w2", wf=wf, st=open_db(), lease_s=60)
            assert thief.run_once().outcome == "done"
            ctx.heartbeat()
        return {"by": ctx.worker_id}

    wf = Workflow("slow", [Step("slow", slow, timeout_s=30)])
    store.submit("j", {}, now=clock.now())
    result = make_worker("w1", wf=wf, lease_s=60).run_once()
    assert result.outcome == "lease_lost"
    assert calls == ["w1", "w2"]
    assert store.get("j").result == {"by": "w2"}


def test_a_step_timeout_must_be_shorter_than_the_lease(workflow, store, clock, make_worker):
    with pytest.raises(InvalidInput, match="shorter than the lease"):
        make_worker(lease_s=30, step_timeout_s=30)


HANG_S = 60.0  # a step that hangs: the worker's timeout (0.3 s) must end it long before this


def test_a_hung_step_is_abandoned_at_its_timeout_and_the_job_retried(store):
    # The step hangs far longer than the bound, and the lease is far longer than the timeout: on a
    # busy machine the worker may take seconds to notice the timeout, but only abandoning the step
    # ends run_once before the hang would, and the lease cannot run out first.
    release = threading.Event()

    def hang(ctx):
        release.wait(HANG_S)
        return {"late": True}

    wf = Workflow("hang", [Step("hang", hang)])
    from engine import SystemClock, Worker

    store.submit("j", {}, now=time.time())
    worker = Worker(store, wf, clock=SystemClock(), lease_s=30, step_timeout_s=0.3, threaded=True)
    started = time.monotonic()
    result = worker.run_once()
    release.set()
    assert result.outcome == "retry"
    assert time.monotonic() - started < HANG_S / 3
    job = store.get("j")
    assert job.state == "pending"
    assert "StepTimeout" in job.last_error
    assert job.lease_owner is None


def test_the_threaded_runner_renews_the_lease_while_a_step_runs(store):
    from engine import SystemClock, Worker

    def steady(ctx):
        first = ctx.lease_until
        time.sleep(0.6)
        return {"renewed": ctx.lease_until > first}

    wf = Workflow("steady", [Step("steady", steady)])
    store.submit("j", {}, now=time.time())
    worker = Worker(store, wf, clock=SystemClock(), lease_s=0.9, step_timeout_s=0.8, threaded=True)
    assert worker.run_once().outcome == "done"
    assert store.get("j").result == {"renewed": True}
