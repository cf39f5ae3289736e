"""Human operations are guarded transitions with errors that say what would allow them."""

import pytest

from engine import IllegalAction, InvalidInput, NeedsHuman, Step, StepOutput, UnknownJob, Workflow, cancel, requeue, resolve


@pytest.fixture
def failing_wf():
    calls = {"n": 0}

    def extract(ctx):
        calls["n"] += 1
        if calls["n"] == 1:
            from engine import BadRequest

            raise BadRequest("400 bad scan")
        return {"ok": True}

    def review(ctx):
        return NeedsHuman("unsure") if ctx.payload.get("unsure") else {"ok": True}

    return Workflow(
        "h",
        [
            Step("fetch", lambda ctx: {}, working="fetching", done="fetched", failed="failed_fetch"),
            Step("extract", extract, working="extracting", done="extracted", failed="failed_extract"),
            Step("verify", review, working="verifying", done="verified", review=True),
        ],
    )


def test_requeue_moves_a_failed_job_back_before_its_step_and_it_then_completes(store, clock, make_worker, failing_wf):
    store.submit("j", {}, now=clock.now())
    make_worker(wf=failing_wf).run_once()
    assert store.get("j").state == "failed_extract"
    assert requeue(store, failing_wf, "j", now=clock.now()).state == "fetched"
    assert make_worker(wf=failing_wf).run_once().state == "verified"
    assert sorted(store.memos("j")) == ["extract", "fetch", "verify"]


def test_requeue_of_a_job_that_did_not_fail_names_the_states_that_allow_it(store, clock, failing_wf):
    store.submit("j", {}, now=clock.now())
    with pytest.raises(IllegalAction, match="job 'j' is in state 'pending'; requeue needs one of: failed_extract, failed_fetch"):
        requeue(store, failing_wf, "j", now=clock.now())
    assert store.get("j").state == "pending"


def test_resolve_reverify_and_resolve_cancel(store, clock, make_worker, failing_wf):
    store.submit_many([("a", {"unsure": True}), ("b", {"unsure": True})], now=clock.now())
    worker = make_worker(wf=failing_wf)
    worker.run_once()
    requeue(store, failing_wf, "a", now=clock.now())
    worker.run_once()
    worker.run_once()
    assert {store.get("a").state, store.get("b").state} == {"needs_human"}
    assert resolve(store, failing_wf, "a", "reverify", now=clock.now()).state == "extracted"
    assert resolve(store, failing_wf, "b", "cancel", now=clock.now()).state == "cancelled"
    with pytest.raises(IllegalAction, match="'b' is in state 'cancelled'; resolve cancel needs one of: needs_human"):
        resolve(store, failing_wf, "b", "cancel", now=clock.now())
    with pytest.raises(InvalidInput, match="reverify, cancel"):
        resolve(store, failing_wf, "a", "approve", now=clock.now())


def test_cancel_only_a_pending_job(store, clock, make_worker, workflow):
    store.submit_many([("a", {"source": "a"}), ("b", {"source": "b"})], now=clock.now())
    assert cancel(store, workflow, "a", now=clock.now()).state == "cancelled"
    make_worker().run_once()
    with pytest.raises(IllegalAction, match="'b' is in state 'delivered'; cancel needs one of: pending"):
        cancel(store, workflow, "b", now=clock.now())
    with pytest.raises(UnknownJob, match="'nope'"):
        cancel(store, workflow, "nope", now=clock.now())


def test_a_cancelled_job_is_never_claimed(store, clock, make_worker, workflow):
    store.submit("a", {"source": "a"}, now=clock.now())
    cancel(store, workflow, "a", now=clock.now())
    assert make_worker().run_once().outcome == "idle"
