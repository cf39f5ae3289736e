"""The demo's outside world over real loopback HTTP: an idempotent receiver and a document source.

Each test starts the receiver in its own process and talks to it with the engine's own
``HttpSender`` and the workers' ``HttpDocuments``, then reads the receiver's ledger.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest

from chaos.fleet.receiver import ReceiverNotStarted, ReceiverProcess, deliveries, receiver_figures
from chaos.fleet.services import HttpDocuments
from chaos.fleet.verdict import interruptions_of
from chaos.core.world import Call
from engine import ConnectionFailed, HttpSender, ServerError


@pytest.fixture
def ledger(tmp_path):
    return str(tmp_path / "receiver.db")


def test_the_receiver_applies_one_effect_per_idempotency_key_and_records_every_request(ledger):
    with ReceiverProcess.start(ledger, drop_every=0, fail_every=0) as receiver:
        sender = HttpSender(receiver.url, timeout_s=5)
        sender.send("doc-1:delivery", "delivery", {"n": 1})
        sender.send("doc-1:delivery", "delivery", {"n": 1})
        sender.send("doc-2:delivery", "delivery", {"n": 2})
    assert [(d.key, d.applied) for d in deliveries(ledger)] == [
        ("doc-1:delivery", True),
        ("doc-1:delivery", False),
        ("doc-2:delivery", True),
    ]
    assert receiver_figures(ledger) == {"requests": 3, "applied": 2, "keys": 2, "replies_dropped": 0, "duplicates_applied": 0}


def test_a_dropped_reply_looks_like_a_failed_delivery_to_the_sender_but_the_effect_was_applied(ledger):
    with ReceiverProcess.start(ledger, drop_every=1, fail_every=0) as receiver:
        sender = HttpSender(receiver.url, timeout_s=5)
        with pytest.raises(ConnectionFailed):
            sender.send("doc-1:delivery", "delivery", {})
        sender.send("doc-1:delivery", "delivery", {})  # the sender's retry: answered, not applied again
    assert [(d.key, d.applied) for d in deliveries(ledger)] == [("doc-1:delivery", True), ("doc-1:delivery", False)]
    assert receiver_figures(ledger)["replies_dropped"] == 1


def test_without_dedupe_a_resent_key_is_applied_twice(ledger):
    with ReceiverProcess.start(ledger, dedupe=False, drop_every=0, fail_every=0) as receiver:
        sender = HttpSender(receiver.url, timeout_s=5)
        sender.send("doc-1:delivery", "delivery", {})
        sender.send("doc-1:delivery", "delivery", {})
    assert receiver_figures(ledger)["duplicates_applied"] == 1


def test_the_document_source_serves_each_document_and_refuses_the_first_fetch_of_every_nth(ledger):
    ctx = SimpleNamespace(job_id="doc-1", step="fetch")
    with ReceiverProcess.start(ledger, drop_every=0, fail_every=2) as receiver:
        documents = HttpDocuments(receiver.documents_url)
        assert documents.fetch(ctx, "doc-1").startswith("Report doc-1\n")
        with pytest.raises(ServerError):
            documents.fetch(ctx, "doc 2/b")  # the second new document; its name is quoted in the URL
        assert documents.fetch(ctx, "doc 2/b").startswith("Report doc 2/b\n")
        assert receiver.stats() == {"served": 2, "refused": 1}
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{receiver.port}/nowhere", timeout=5)


@pytest.mark.parametrize("lengths", [["abc"], ["1e3"], ["+2"], ["1_0"], ["-5"], [" "], ["2", "3"]])
def test_a_bad_content_length_is_answered_400_without_a_traceback(ledger, tmp_path, lengths):
    log = tmp_path / "receiver.log"
    with ReceiverProcess.start(ledger, drop_every=0, fail_every=0, log_path=str(log)) as receiver:
        conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
        conn.putrequest("POST", "/effects")
        conn.putheader("Idempotency-Key", "doc-1:delivery")
        for length in lengths:
            conn.putheader("Content-Length", length)
        conn.endheaders(b"{}")
        response = conn.getresponse()
        assert response.status == 400, response.read()
        conn.close()
    assert "Traceback" not in log.read_text()
    assert deliveries(ledger) == []


def test_a_receiver_that_cannot_start_says_why_in_its_exception(tmp_path):
    """The log may be in a folder the caller removes (a trial that cannot start), so its last line is in the message."""
    with pytest.raises(ReceiverNotStarted, match=r"exited with status 1 .*: sqlite3.OperationalError: unable to open database file"):
        ReceiverProcess.start(str(tmp_path / "missing" / "receiver.db"), log_path=str(tmp_path / "receiver.log"))


def test_the_document_source_must_be_on_loopback():
    with pytest.raises(ValueError, match="must be on loopback"):
        HttpDocuments("http://example.com/documents")


def _call(seq, job, step, worker, at):
    return Call(seq, job, step, step, worker, 1, at, False, True, None)


def test_a_kill_interrupts_the_step_its_victim_last_paid_for_and_an_abandoned_claim_the_step_before_it():
    calls = [
        _call(1, "d1", "extract", "w1.0", 1.0),
        _call(2, "d1", "verify", "w1.0", 2.0),
        _call(3, "d2", "extract", "w2.0", 3.0),
        _call(4, "d2", "verify", "w2.0", 5.0),
    ]
    found = interruptions_of(calls, killed={"w1.0", "w9.0"}, abandons=[("w2.0", "d2", "busy", 4.0)])
    assert found == {("d1", "verify"): 1, ("d2", "extract"): 1}
