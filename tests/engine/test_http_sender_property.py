"""Nothing is marked sent that never arrived: against a receiver whose behaviour Hypothesis draws
(every status class, redirects, silences, trickled headers and bodies, connection resets, a 429's
Retry-After in both forms), one pass of send_outbox marks the row sent if and only if the receiver
applied the effect (received the whole POST body and wrote its 2xx answer), always within a bounded
time, and a row left unsent says why and waits at least what Retry-After asked (up to its maximum).

Method: a real SQLite file, a real receiver on 127.0.0.1 (tests/http_receivers.py), the real
HttpSender with a 1 s deadline. Timings are drawn far from the deadline on either side (an answer
on time takes about 0.1 s; a late one would take 6 s or more), so the verdict does not depend on
how busy the machine is.
"""

from __future__ import annotations

import email.utils
import random
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from engine import RETRY_AFTER_S_MAX, FakeClock, GeneratedDocuments, HttpSender, LocalModel, SqliteStore, Worker, reference_workflow, send_outbox
from http_receivers import Reply, ScriptedReceiver

T0 = 1_700_000_000.0
TIMEOUT_S = 1.0
BOUND_S = TIMEOUT_S + 8.0  # generous: the deadline plus a busy machine's scheduling

# Status classes, weighted so that a small run sees each: 429 (with its Retry-After forms) and 2xx
# (the only deliveries) twice as often as the others.
STATUSES = {
    "1xx": [102, 103], "2xx": [200, 201, 202, 204, 299], "3xx": [301, 302, 303, 307, 308],
    "4xx": [400, 404, 409, 418], "429": [429], "5xx": [500, 502, 503, 599],
}
CLASSES = ["1xx", "2xx", "2xx", "3xx", "4xx", "429", "429", "5xx"]
# How the answer comes: on time (at once, or its status line and headers trickled in about 0.1 s),
# or late (silent for far longer than the deadline, headers trickled over 6 s or more). A body
# trickled past the deadline is on time: the status line and headers are the answer.
TIMINGS = {
    "at once": {},
    "headers trickled, on time": {"trickle_s": 0.001},
    "body trickled past the deadline": {"body": b"y" * 60, "body_trickle_s": 0.1},
    "silent": {"delay_s": 60.0},
    "headers trickled, late": {"trickle_s": 0.1},
}
LATE = {"silent", "headers trickled, late"}


@st.composite
def behaviours(draw):
    status = draw(st.sampled_from(STATUSES[draw(st.sampled_from(CLASSES))]))
    headers: tuple[tuple[str, str], ...] = ()
    retry_after = None
    if 300 <= status < 400:
        headers = (("Location", "/elsewhere"),)  # the receiver itself answers 200 there: following it would look like success
    if status == 429:
        form = draw(st.sampled_from(["seconds", "date", "garbage", "absent"]))
        event(f"Retry-After {form}")
        if form == "seconds":
            retry_after = float(draw(st.integers(0, 10**7)))
            headers = (("Retry-After", str(int(retry_after))),)
        elif form == "date":
            retry_after = float(draw(st.integers(-10**5, 10**7)))
            headers = (("Retry-After", email.utils.formatdate(T0 + retry_after, usegmt=True)),)
        elif form == "garbage":
            headers = (("Retry-After", draw(st.sampled_from(["soon", "1e3x", "Mon, 99 Xyz", "-1", ""]))),)
    timing = draw(st.sampled_from(sorted(TIMINGS)))
    reset = draw(st.sampled_from([None, None, None, "before_body", "after_body", "mid_answer"]))
    reply = Reply(status, headers=headers, reset=reset, interim=draw(st.booleans()), **TIMINGS[timing])
    return reply, timing, retry_after


def one_row_store(directory: str) -> SqliteStore:
    """A real SQLite file holding one committed, unsent outbox row (doc-1's delivery)."""
    store = SqliteStore(str(Path(directory) / "engine.db"))
    clock = FakeClock(T0)
    store.submit("doc-1", {"source": "doc-1"}, now=T0)
    Worker(store, reference_workflow(LocalModel(), GeneratedDocuments()), clock=clock, rng=random.Random(1), threaded=False).run_once()
    return store


@settings(max_examples=36, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(behaviour=behaviours())
def test_a_row_is_marked_sent_if_and_only_if_the_receiver_applied_it_within_a_bounded_time(behaviour):
    reply, timing, retry_after = behaviour
    event(f"{reply.status // 100}xx")
    event(timing)
    event(f"reset {reply.reset}")
    clock = FakeClock(T0)
    with tempfile.TemporaryDirectory() as directory:
        store = one_row_store(directory)
        try:
            with ScriptedReceiver(lambda path: reply if path == "/effects" else Reply(200)) as receiver:
                started = time.monotonic()
                report = send_outbox(store, HttpSender(receiver.url, timeout_s=TIMEOUT_S, clock=clock), clock=clock, rng=random.Random(2))
                elapsed_s = time.monotonic() - started
            sent_at, next_at, last_error = store.conn.execute("SELECT sent_at, next_attempt_at, last_error FROM outbox").fetchone()
        finally:
            store.close()
    applied = [r for r in receiver.received if r.applied and (r.method, r.path) == ("POST", "/effects")]
    marked = sent_at is not None
    assert elapsed_s < BOUND_S, f"{timing}: one request took {elapsed_s:.1f} s"
    assert (report.sent, report.failed) == ((1, 0) if marked else (0, 1))
    assert len(applied) <= 1
    assert marked == bool(applied), f"marked sent {marked}, applied {bool(applied)}: {reply}, {timing}; {last_error}"
    on_time = reply.reset is None and timing not in LATE
    assert marked == (on_time and 200 <= reply.status < 300), f"{reply}, {timing}: marked {marked}; {last_error}"
    if not marked:
        assert last_error, "a row left unsent says why"
        wait_s = next_at - T0
        floor_s = min(max(retry_after, 0.0), RETRY_AFTER_S_MAX) if on_time and reply.status == 429 and retry_after is not None else 0.0
        assert max(1.0, floor_s) <= wait_s <= max(2.0, floor_s), f"waits {wait_s} s; Retry-After asked {retry_after}"
