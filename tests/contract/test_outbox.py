"""The outbox delivers every committed effect at least once with a stable idempotency key."""

import pytest

from engine import InvalidInput, Step, StepOutput, Workflow, send_outbox

from .conftest import rows


class Receiver:
    def __init__(self, fail_times=0):
        self.requests = []
        self.fail_times = fail_times

    def send(self, key, kind, payload):
        if self.fail_times:
            self.fail_times -= 1
            raise ConnectionError("receiver down")
        self.requests.append((key, kind, payload))


@pytest.fixture
def delivered_job(store, clock, make_worker):
    store.submit("doc-1", {"source": "doc-1"}, now=clock.now())
    make_worker().run_once()
    return "doc-1"


def test_a_committed_effect_is_delivered_once_with_a_stable_key(store, clock, delivered_job):
    receiver = Receiver()
    assert send_outbox(store, receiver, clock=clock).sent == 1
    assert send_outbox(store, receiver, clock=clock).sent == 0
    assert [r[0] for r in receiver.requests] == ["doc-1:delivery"]


def test_a_crash_between_send_and_mark_re_sends_the_same_key(store, clock, delivered_job):
    receiver = Receiver()

    class CrashAfterSend:
        def send(self, key, kind, payload):
            receiver.send(key, kind, payload)
            raise SystemExit("killed after delivering, before marking")

    with pytest.raises(SystemExit):
        send_outbox(store, CrashAfterSend(), clock=clock)
    assert store.conn.execute("SELECT sent_at FROM outbox").fetchone()[0] is None
    send_outbox(store, receiver, clock=clock)
    assert [r[0] for r in receiver.requests] == ["doc-1:delivery", "doc-1:delivery"]
    assert store.conn.execute("SELECT sent_at FROM outbox").fetchone()[0] is not None


def test_a_failed_send_is_retried_later_with_backoff_and_never_marked(store, clock, delivered_job):
    receiver = Receiver(fail_times=1)
    report = send_outbox(store, receiver, clock=clock)
    assert (report.sent, report.failed) == (0, 1)
    [row] = rows(store, "SELECT sent_at, attempts, next_attempt_at, last_error FROM outbox")
    assert row["sent_at"] is None
    assert row["attempts"] == 1
    assert 1.0 <= row["next_attempt_at"] - clock.now() <= 2.0
    assert "receiver down" in row["last_error"]
    assert send_outbox(store, receiver, clock=clock).sent == 0
    clock.advance(2)
    assert send_outbox(store, receiver, clock=clock).sent == 1


def test_two_steps_cannot_declare_one_effect_kind_whose_second_effect_would_be_dropped(store, clock, make_worker):
    """A job keeps one outbox row per kind (its key, '<job id>:<kind>', is what the receiver dedupes
    on), so a second step emitting the same kind would lose its effect without a word: the workflow
    is refused when it is defined, and each step's own kind is delivered."""
    def emit(text):
        return lambda ctx: StepOutput({}, effects={"email": {"text": text}})

    with pytest.raises(InvalidInput, match="effect kind 'email' is declared by steps 'a' and 'b'"):
        Workflow("twice", [Step("a", emit("first"), effects=("email",)), Step("b", emit("second"), effects=("email",))])

    def emit_as(kind, text):
        return lambda ctx: StepOutput({}, effects={kind: {"text": text}})

    wf = Workflow("apart", [Step("a", emit_as("email_first", "first"), effects=("email_first",)),
                            Step("b", emit_as("email_second", "second"), effects=("email_second",))])
    store.submit("j", {}, now=clock.now())
    assert make_worker(wf=wf).run_once().outcome == "done"
    receiver = Receiver()
    assert send_outbox(store, receiver, clock=clock).sent == 2
    assert sorted(receiver.requests) == [("j:email_first", "email_first", {"text": "first"}),
                                         ("j:email_second", "email_second", {"text": "second"})]
