"""The HTTP sender marks an effect sent only when the receiver answered its POST with a 2xx, and
every other answer (a redirect, silence, a trickle, a 429) leaves the row unsent with a last_error
that says what happened. Each test talks to a real receiver on 127.0.0.1 through send_outbox and a
real SQLite file."""

from __future__ import annotations

import time

import pytest

from engine import HttpSender, send_outbox
from http_receivers import Reply, ScriptedReceiver


@pytest.fixture
def outbox_row(store, clock, make_worker):
    """One committed, unsent outbox row (the reference workflow's delivery effect of doc-1)."""
    store.submit("doc-1", {"source": "doc-1"}, now=clock.now())
    make_worker().run_once()
    return store


def outbox(store):
    return [dict(zip(("sent_at", "attempts", "next_attempt_at", "last_error"), row)) for row in
            store.conn.execute("SELECT sent_at, attempts, next_attempt_at, last_error FROM outbox").fetchall()]


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_not_a_delivery_the_row_stays_unsent_naming_the_status_and_location(outbox_row, clock, status):
    def script(path):
        if path == "/effects":
            return Reply(status, headers=(("Location", f"http://127.0.0.1:{receiver.port}/target"),))
        return Reply(200)  # the redirect's target accepts anything: following it would read as sent

    with ScriptedReceiver(script) as receiver:
        report = send_outbox(outbox_row, HttpSender(receiver.url, timeout_s=5), clock=clock)
        seen = [(r.method, r.path) for r in receiver.received]
    assert (report.sent, report.failed) == (0, 1)
    assert seen == [("POST", "/effects")]  # the redirect was not followed
    [row] = outbox(outbox_row)
    assert row["sent_at"] is None
    assert f"{status} redirect" in row["last_error"]
    assert f"http://127.0.0.1:{receiver.port}/target" in row["last_error"]


def test_a_2xx_other_than_200_is_a_delivery(outbox_row, clock):
    with ScriptedReceiver(lambda path: Reply(204)) as receiver:
        report = send_outbox(outbox_row, HttpSender(receiver.url, timeout_s=5), clock=clock)
    assert (report.sent, report.failed) == (1, 0)
    assert [r.path for r in receiver.applied()] == ["/effects"]
    assert outbox(outbox_row)[0]["sent_at"] is not None


SENDER_TIMEOUT_S = 1.0
BOUND_S = 10.0  # generous: the request's deadline is 1 s; a busy machine must not fail the test


@pytest.mark.parametrize("reply, what", [
    (Reply(200, trickle_s=0.5), "a status line and headers trickled at 2 bytes a second"),
    (Reply(200, delay_s=60), "a receiver that reads the request and says nothing for a minute"),
])
def test_a_trickling_or_silent_receiver_fails_the_send_at_the_deadline_and_the_row_records_it(outbox_row, clock, reply, what):
    with ScriptedReceiver(lambda path: reply) as receiver:
        started = time.monotonic()
        report = send_outbox(outbox_row, HttpSender(receiver.url, timeout_s=SENDER_TIMEOUT_S), clock=clock)
        elapsed_s = time.monotonic() - started
    assert elapsed_s < BOUND_S, what
    assert (report.sent, report.failed) == (0, 1), what
    [row] = outbox(outbox_row)
    assert row["sent_at"] is None
    assert row["last_error"].startswith("StepTimeout: ")
    assert "no complete answer within 1 s (connect, send and read together)" in row["last_error"]


def test_a_2xx_whose_body_trickles_is_a_delivery_bounded_by_the_deadline(outbox_row, clock):
    """The status line and headers are the answer; the body is read only until the deadline."""
    with ScriptedReceiver(lambda path: Reply(200, body=b"x" * 100, body_trickle_s=0.5)) as receiver:
        started = time.monotonic()
        report = send_outbox(outbox_row, HttpSender(receiver.url, timeout_s=SENDER_TIMEOUT_S), clock=clock)
        elapsed_s = time.monotonic() - started
        applied = len(receiver.applied())
    assert elapsed_s < BOUND_S
    assert (report.sent, report.failed, applied) == (1, 0, 1)
