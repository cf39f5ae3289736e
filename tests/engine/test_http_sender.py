"""The HTTP sender marks an effect sent only when the receiver answered its POST with a 2xx, and
every other answer (a redirect, silence, a trickle, a 429) leaves the row unsent with a last_error
that says what happened. Each test talks to a real receiver on 127.0.0.1 through send_outbox and a
real SQLite file."""

from __future__ import annotations

import base64
import email.utils
import random
import socket
import subprocess
import sys
import time

import pytest

from engine import RETRY_AFTER_S_MAX, HttpSender, send_outbox
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


def _rate_limited(outbox_row, clock, retry_after):
    """One send to a receiver answering 429 with this Retry-After; the row's wait and last_error."""
    headers = () if retry_after is None else (("Retry-After", retry_after),)
    with ScriptedReceiver(lambda path: Reply(429, headers=headers)) as receiver:
        report = send_outbox(outbox_row, HttpSender(receiver.url, timeout_s=5, clock=clock), clock=clock, rng=random.Random(3))
    assert (report.sent, report.failed) == (0, 1)
    [row] = outbox(outbox_row)
    assert row["sent_at"] is None
    return row["next_attempt_at"] - clock.now(), row["last_error"]


@pytest.mark.parametrize("form", ["delta-seconds", "HTTP-date"])
def test_a_429_s_retry_after_is_honoured_in_both_forms(outbox_row, clock, form):
    value = "120" if form == "delta-seconds" else email.utils.formatdate(clock.now() + 120, usegmt=True)
    wait_s, last_error = _rate_limited(outbox_row, clock, value)
    assert wait_s == 120.0  # the first backoff would be 1 to 2 s
    assert "429 from" in last_error and "Retry-After honoured" in last_error


@pytest.mark.parametrize("form", ["delta-seconds", "HTTP-date"])
def test_a_retry_after_longer_than_the_maximum_waits_the_maximum(outbox_row, clock, form):
    value = "9999999" if form == "delta-seconds" else email.utils.formatdate(clock.now() + 30 * 86400, usegmt=True)
    wait_s, _ = _rate_limited(outbox_row, clock, value)
    assert wait_s == RETRY_AFTER_S_MAX


@pytest.mark.parametrize("value", ["soon", "-5", "Thu, 99 Foo 2024 99:99:99 GMT", None])
def test_a_retry_after_not_understood_falls_back_to_the_backoff_without_a_crash(outbox_row, clock, value):
    wait_s, last_error = _rate_limited(outbox_row, clock, value)
    assert 1.0 <= wait_s <= 2.0  # the first full-jitter backoff
    assert last_error.startswith("RateLimited: 429 from")
    assert "could not convert" not in last_error and "the usual backoff" in last_error


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("answer", ["closed port", "500", "301 to a url with a token"])
def test_a_receiver_url_s_password_and_query_values_are_never_stored_nor_printed(outbox_row, db_path, answer):
    """Through the command line, as an operator runs it: `send` to a url holding a password and a
    token, then `status`; neither secret is in the database, the output or the errors. A row
    stored by an older engine with a password in its error is shown redacted too."""
    def script(path):
        if answer == "500":
            return Reply(500)
        return Reply(301, headers=(("Location", "https://other:s3cret@127.0.0.1/x?token=t0ken"),))

    with ScriptedReceiver(script) as receiver:
        port = _closed_port() if answer == "closed port" else receiver.port
        sent = _cli("send", "--db", db_path, "--url", f"http://user:s3cret@127.0.0.1:{port}/effects?token=t0ken")
    assert sent.returncode == 0, sent.stderr
    assert "sent 0, failed 1" in sent.stdout
    [row] = outbox(outbox_row)
    assert row["sent_at"] is None
    assert "user:***@127.0.0.1" in row["last_error"] and "token=***" in row["last_error"]
    outbox_row.conn.execute(
        "INSERT INTO outbox (job_id, kind, payload, created, next_attempt_at, last_error) VALUES "
        "('old-1', 'delivery', '{}', 0, 0, 'ConnectionFailed: http://user:s3cret@h/e?token=t0ken: refused')"
    )
    outbox_row.conn.commit()
    shown = [_cli("status", "--db", db_path), _cli("status", "--db", db_path, "--json")]
    stored = "\n".join(r[0] for r in outbox_row.conn.execute("SELECT last_error FROM outbox WHERE job_id = 'doc-1'"))
    for text in [sent.stdout, sent.stderr, stored] + [s.stdout + s.stderr for s in shown]:
        assert "s3cret" not in text and "t0ken" not in text, text
    assert "user:***@h/e?token=***" in shown[0].stdout


def test_a_receiver_url_s_user_and_password_are_sent_as_basic_authentication(outbox_row, clock):
    with ScriptedReceiver(lambda path: Reply(200)) as receiver:
        url = receiver.url.replace("http://", "http://us%40er:p%3Ass@")
        assert send_outbox(outbox_row, HttpSender(url, timeout_s=5), clock=clock).sent == 1
        [request] = receiver.received
    assert request.headers["authorization"] == "Basic " + base64.b64encode(b"us@er:p:ss").decode()


def test_a_2xx_cut_inside_its_headers_is_not_a_delivery(outbox_row, clock):
    """http.client ends a header block at the end of the stream as at a blank line; a receiver
    that crashed half-way through its answer's headers has not answered."""
    with ScriptedReceiver(lambda path: Reply(200, reset="mid_answer")) as receiver:
        report = send_outbox(outbox_row, HttpSender(receiver.url, timeout_s=5), clock=clock)
    assert (report.sent, report.failed) == (0, 1)
    [row] = outbox(outbox_row)
    assert row["sent_at"] is None
    assert "inside its answer's status line and headers" in row["last_error"]
