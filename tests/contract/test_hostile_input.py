"""Hostile input at the store's and the worker's boundaries: a typed error naming the input and
the fix, the same on both backends, and nothing already stored changes."""

import datetime

import pytest

from engine import InvalidInput, Step, StepOutput, Workflow, send_outbox, status

from .conftest import rows


def nested(depth):
    value = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def one_step(fn, **step_options):
    return Workflow("one", [Step("work", fn, **step_options)])


@pytest.mark.parametrize(
    "job_id, named",
    [
        ("doc-\ud800", "surrogate"),  # a lone surrogate cannot be stored as UTF-8 on either backend
        ("doc\x00-1", "NUL"),  # PostgreSQL's text cannot hold NUL: SQLite refuses it too, so both agree
    ],
)
def test_a_job_id_either_backend_cannot_store_is_refused_the_same_way_and_nothing_is_written(store, clock, job_id, named):
    store.submit("kept", {"source": "kept"}, now=clock.now())
    before = store.jobs()
    with pytest.raises(InvalidInput, match=f"job id .*{named}.*") as raised:
        store.submit(job_id, {"source": "x"}, now=clock.now())
    assert "use" in str(raised.value)  # the message says what to do instead
    assert store.jobs() == before


@pytest.mark.parametrize(
    "payload, named",
    [
        ({"text": "lone \udc80 surrogate"}, "surrogate"),
        (nested(100_000), "nested deeper"),
        ({1: "an integer key"}, "keys must be strings"),
        (["a", "list"], "JSON object"),
        ("a string", "JSON object"),
        (7, "JSON object"),
        (None, "JSON object"),
    ],
)
def test_a_payload_that_is_not_a_storable_json_object_is_refused_before_a_row_is_written(store, clock, payload, named):
    store.submit("kept", {"source": "kept"}, now=clock.now())
    before = store.jobs()
    with pytest.raises(InvalidInput, match=f"payload of job 'doc-1'.*{named}"):
        store.submit("doc-1", payload, now=clock.now())
    assert store.jobs() == before


@pytest.mark.parametrize(
    "output, named",
    [
        ({"score": float("nan")}, "NaN"),
        ({"tags": {"a", "b"}}, "set"),
        ({"at": datetime.datetime(2024, 1, 1)}, "datetime"),
        (nested(100_000), "nested deeper"),
    ],
)
def test_a_step_output_json_cannot_hold_fails_the_job_after_one_call_saying_why(store, clock, make_worker, output, named):
    calls = []

    def step(ctx):
        calls.append(ctx.job_id)
        return output

    store.submit("doc-1", {"source": "doc-1"}, now=clock.now())
    worker = make_worker(wf=one_step(step))
    result = worker.run_once()
    assert result.outcome == "failed"
    assert len(calls) == 1
    job = store.get("doc-1")
    assert job.state == "failed_work"
    assert "output of step 'work'" in job.last_error
    assert named in job.last_error
    assert store.memos("doc-1") == {}
    clock.advance(10_000)
    assert worker.run_once().outcome == "idle"  # poison: never paid for again
    assert len(calls) == 1


def test_a_step_effect_json_cannot_hold_fails_the_job_after_one_call(store, clock, make_worker):
    calls = []

    def step(ctx):
        calls.append(ctx.job_id)
        return StepOutput({"ok": True}, effects={"mail": {"when": datetime.date(2024, 1, 1)}})

    store.submit("doc-1", {"source": "doc-1"}, now=clock.now())
    assert make_worker(wf=one_step(step, effects=("mail",))).run_once().outcome == "failed"
    assert len(calls) == 1
    assert "effect 'mail' of step 'work'" in store.get("doc-1").last_error
    assert rows(store, "SELECT id FROM outbox") == []


def test_an_outbox_row_that_cannot_be_delivered_shows_in_status(store, clock, make_worker):
    store.submit("doc-1", {"source": "doc-1"}, now=clock.now())
    make_worker().run_once()

    class Refusing:
        def send(self, key, kind, payload):
            raise ValueError(f"cannot send key {key!r}")

    assert send_outbox(store, Refusing(), clock=clock).failed == 1
    report = status(store, now=clock.now(), settled_states={"delivered"})
    assert report["outbox_failing"] == [
        {"kind": "delivery", "last_error": "ValueError: cannot send key 'doc-1:delivery'", "rows": 1}
    ]


@pytest.mark.parametrize("job_id", ["doc\x00-1", "doc-\ud800"])
def test_an_id_no_job_can_have_is_an_unknown_job_for_every_human_command_on_both_backends(store, clock, workflow, job_id):
    from engine import UnknownJob, cancel, replay, requeue, resolve

    store.submit("kept", {"source": "kept"}, now=clock.now())
    before = store.jobs()
    for command in (
        lambda: store.get(job_id),
        lambda: requeue(store, workflow, job_id, now=clock.now()),
        lambda: resolve(store, workflow, job_id, "cancel", now=clock.now()),
        lambda: cancel(store, workflow, job_id, now=clock.now()),
        lambda: replay(store, workflow, job_id, "extract", clock=clock),
    ):
        with pytest.raises(UnknownJob, match="no job with id"):
            command()
    assert store.jobs() == before
