"""run_once: memo before every step, one transaction per completion, retry vs poison."""

import pytest

from engine import (
    BadRequest,
    ConnectionFailed,
    LocalModel,
    NeedsHuman,
    ParseFailed,
    RateLimited,
    ServerError,
    Step,
    StepOutput,
    StepTimeout,
    ValidationFailed,
    Workflow,
)


class Flaky:
    """A step that fails with the given exceptions in order, then succeeds; counts its calls."""

    def __init__(self, *failures):
        self.failures = list(failures)
        self.calls = 0

    def __call__(self, ctx):
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return StepOutput({"n": self.calls}, cost_usd=0.01)


def one_step(fn, **step_options):
    return Workflow("one", [Step("work", fn, **step_options)])


def test_the_reference_workflow_runs_to_delivered_in_one_claim(store, clock, make_worker):
    store.submit("doc-1", {"source": "doc-1"}, now=clock.now())
    result = make_worker().run_once()
    assert (result.outcome, result.state, result.steps_run) == ("done", "delivered", 4)
    assert sorted(store.memos("doc-1")) == ["deliver", "extract", "fetch", "verify"]
    rows = store.conn.execute("SELECT job_id, kind, sent_at FROM outbox").fetchall()
    assert [tuple(r) for r in rows] == [("doc-1", "delivery", None)]
    job = store.get("doc-1")
    assert job.result == {"key": "doc-1:delivery"}
    assert job.lease_owner is None
    assert job.next_run_at is None


def test_idle_when_nothing_is_due(store, clock, make_worker):
    assert make_worker().run_once().outcome == "idle"


def test_a_step_with_a_memo_row_is_skipped_on_resume(store, clock, make_worker):
    flaky = Flaky()
    wf = one_step(flaky)
    store.submit("j", {}, now=clock.now())
    store.conn.execute("INSERT INTO step_result (job_id, step, output, cost, at) VALUES ('j', 'work', '{\"n\": 41}', 2.5, 0)")
    result = make_worker(wf=wf).run_once()
    assert (result.outcome, result.steps_run, result.steps_skipped) == ("done", 0, 1)
    assert flaky.calls == 0
    assert store.get("j").result == {"n": 41}


def test_a_second_memo_row_for_a_step_fails_loudly_and_rolls_the_whole_commit_back(store, clock, workflow):
    store.submit("j", {"source": "j"}, now=clock.now())
    starts = {s: workflow.next_step(s).working_state for s in workflow.ready_states}
    claim = store.claim("w1", now=clock.now(), lease_s=60, starts=starts)
    store.conn.execute("INSERT INTO step_result (job_id, step, output, cost, at) VALUES ('j', 'fetch', '{}', 0, 0)")
    with pytest.raises(Exception, match="(?i)unique|duplicate"):  # sqlite3.IntegrityError / psycopg UniqueViolation
        store.complete(
            claim, step="fetch", from_state="fetching", done_state="fetched", output_json='{"text":"x"}', cost_usd=1.0,
            effects={"delivery": "{}"}, next_state="extracting", release_at=None, lease_until=clock.now() + 60,
            result_json=None, write_memo=True, now=clock.now(),
        )
    assert store.get("j").state == "fetching"
    assert store.memos("j") == {"fetch": {}}
    assert store.conn.execute("SELECT COUNT(*) FROM outbox").fetchone()[0] == 0


@pytest.mark.parametrize("poison", [BadRequest("400"), ValidationFailed("schema"), ParseFailed("json"), KeyError("bug")])
def test_a_poison_failure_is_called_once_and_goes_to_the_failed_state(store, clock, make_worker, poison):
    flaky = Flaky(poison, poison, poison)
    store.submit("j", {}, now=clock.now())
    result = make_worker(wf=one_step(flaky)).run_once()
    assert result.outcome == "failed"
    assert flaky.calls == 1
    clock.advance(3600)
    assert make_worker(wf=one_step(flaky)).run_once().outcome == "idle"
    job = store.get("j")
    assert job.state == "failed_work"
    assert type(poison).__name__ in job.last_error


@pytest.mark.parametrize("transient", [StepTimeout("t"), ConnectionFailed("c"), RateLimited("429"), ServerError("503", 503)])
def test_a_retryable_failure_is_retried_with_backoff_then_succeeds(store, clock, make_worker, transient):
    flaky = Flaky(transient, transient)
    wf = one_step(flaky)
    store.submit("j", {}, now=clock.now())
    worker = make_worker(wf=wf)
    assert worker.run_once().outcome == "retry"
    job = store.get("j")
    assert job.state == "pending"
    assert 1.0 <= job.next_run_at - clock.now() <= 2.0
    assert worker.run_once().outcome == "idle"  # not before its backoff
    clock.advance(2.0)
    assert worker.run_once().outcome == "retry"
    clock.advance(4.0)
    assert worker.run_once().outcome == "done"
    assert flaky.calls == 3


def test_retries_stop_after_five_attempts_in_the_failed_state(store, clock, make_worker):
    flaky = Flaky(*[ServerError("503", 503)] * 10)
    store.submit("j", {}, now=clock.now())
    worker = make_worker(wf=one_step(flaky))
    outcomes = []
    for _ in range(10):
        outcomes.append(worker.run_once().outcome)
        clock.advance(40)
    assert outcomes[:5] == ["retry"] * 4 + ["failed"]
    assert flaky.calls == 5
    assert store.get("j").state == "failed_work"
    assert store.get("j").last_error.startswith("gave up after 5 attempts")


def test_a_429_retry_after_is_honoured_as_a_minimum_delay(store, clock, make_worker):
    store.submit("j", {}, now=clock.now())
    make_worker(wf=one_step(Flaky(RateLimited("429", retry_after_s=90)))).run_once()
    assert store.get("j").next_run_at >= clock.now() + 90


def test_an_exception_a_step_declares_retryable_is_retried(store, clock, make_worker):
    store.submit("j", {}, now=clock.now())
    result = make_worker(wf=one_step(Flaky(OSError("disk")), retry_on=(OSError,))).run_once()
    assert result.outcome == "retry"


def test_a_review_step_that_cannot_pass_parks_the_job_in_needs_human(store, clock, make_worker):
    wf = Workflow("r", [Step("check", lambda ctx: NeedsHuman("blurry scan", cost_usd=0.2), review=True)])
    store.submit("j", {}, now=clock.now())
    assert make_worker(wf=wf).run_once().outcome == "needs_human"
    job = store.get("j")
    assert job.state == "needs_human"
    assert "blurry scan" in job.last_error
    assert store.memos("j") == {}


def test_a_poison_failure_in_a_review_step_goes_to_needs_human(store, clock, make_worker):
    wf = Workflow("r", [Step("check", Flaky(BadRequest("400")), review=True)])
    store.submit("j", {}, now=clock.now())
    assert make_worker(wf=wf).run_once().outcome == "needs_human"


def test_a_job_whose_worker_dies_every_time_is_parked_after_five_attempts(store, clock, make_worker):
    def dies(ctx):
        raise SystemExit("simulated death")  # not an Exception: escapes like a crash would

    wf = one_step(dies)
    store.submit("j", {}, now=clock.now())
    for _ in range(5):
        with pytest.raises(SystemExit):
            make_worker(wf=wf, lease_s=10, step_timeout_s=5).run_once()
        clock.advance(11)
    result = make_worker(wf=wf, lease_s=10, step_timeout_s=5).run_once()
    assert result.outcome == "failed"
    assert "lease expired 5 times" in store.get("j").last_error


class CountingModel(LocalModel):
    """The offline model, counting its paid calls."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def complete(self, ctx, task, prompt):
        self.calls += 1
        return super().complete(ctx, task, prompt)


class Unprintable(Exception):
    """An exception whose message cannot be read: its ``str()`` raises."""

    def __str__(self):
        raise RuntimeError("no message")


def _bug_after_the_paid_call(bug):
    """What a step with a bug returns (or raises) once its paid call returned."""
    if bug == "undeclared effect":
        return StepOutput({"ok": True}, effects={"email": {"to": "a"}})
    if bug == "NeedsHuman from an ordinary step":
        return NeedsHuman("the model is unsure")
    if bug == "effects as a list":
        return StepOutput({"ok": True}, effects=[("mail", {"to": "a"})])
    raise Unprintable()


@pytest.mark.parametrize(
    "bug, named",
    [
        ("undeclared effect", "emitted effects ['email'] it does not declare"),
        ("NeedsHuman from an ordinary step", "returned NeedsHuman ('the model is unsure') but is not a review step"),
        ("effects as a list", "effects of step 'work' must be a dict"),
        ("unprintable exception", "Unprintable (its message cannot be read: str() raised RuntimeError)"),
    ],
)
def test_a_workflow_bug_after_the_paid_call_is_paid_once_and_parks_the_job_naming_it(store, clock, make_worker, bug, named):
    # Each worker below is a fresh process: one whose run_once raised would have died, and the job
    # would have been taken up again once its lease expired, paid for again every time.
    model = CountingModel()

    def step(ctx):
        model.complete(ctx, "summarise", "a document")
        return _bug_after_the_paid_call(bug)

    wf = one_step(step, effects=("mail",))
    store.submit("j", {}, now=clock.now())
    outcomes = []
    for _ in range(8):
        try:
            outcomes.append(make_worker(wf=wf, lease_s=10, step_timeout_s=5).run_once().outcome)
        except Exception as exc:
            outcomes.append(type(exc).__name__)
        clock.advance(11)
    assert model.calls == 1
    assert outcomes == ["failed"] + ["idle"] * 7
    job = store.get("j")
    assert job.state == "failed_work"
    assert named in job.last_error
    assert store.memos("j") == {}
    assert store.conn.execute("SELECT COUNT(*) FROM outbox").fetchone()[0] == 0
