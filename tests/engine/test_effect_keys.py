"""An effect's idempotency key names exactly one (job, kind) pair: kinds are identifiers, refused
when the workflow is defined otherwise, so the key splits at its last colon; a stored row whose kind
holds a colon (written before kinds were checked) is never sent under a key another effect may own."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import (
    EFFECT_KIND_PATTERN, InvalidInput, Step, Workflow, decode_idempotency_key, encode_idempotency_key, idempotency_key,
    send_outbox, split_idempotency_key,
)
from engine._inputs import JOB_ID_CHARS_MAX, check_job_id

# Any job id the engine accepts: non-blank text without NUL or lone surrogates, up to the limit;
# colons are drawn often, since they are what could make two keys collide.
job_ids = st.text(
    alphabet=st.one_of(st.sampled_from(":a%\r\n "), st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")),
    min_size=1, max_size=JOB_ID_CHARS_MAX,
).filter(lambda s: s.strip())
kinds = st.from_regex(EFFECT_KIND_PATTERN, fullmatch=True)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(pairs=st.lists(st.tuples(job_ids, kinds), min_size=2, max_size=6, unique=True))
def test_distinct_job_and_kind_pairs_give_distinct_keys_that_split_back_to_their_pair(pairs):
    keys = {}
    for job_id, kind in pairs:
        check_job_id(job_id)
        key = idempotency_key(job_id, kind)
        assert split_idempotency_key(key) == (job_id, kind)
        assert split_idempotency_key(decode_idempotency_key(encode_idempotency_key(key))) == (job_id, kind)
        assert keys.setdefault(key, (job_id, kind)) == (job_id, kind), f"{key!r} is the key of two effects"


def test_the_issue_s_colliding_pair_cannot_both_be_declared():
    assert idempotency_key("a:b", "c") == "a:b:c"
    with pytest.raises(InvalidInput, match=r"effect kind 'b:c' of step 'notify' in workflow 'w' must match .*no ':'.*rename it, e\.g\. 'b_c'"):
        Workflow("w", [Step("notify", lambda ctx: 1, effects=("b:c",))])


@pytest.mark.parametrize("kind", ["b:c", "send email", "1st", "café", "a" * 101, "x\n"])
def test_a_kind_that_is_not_an_identifier_is_refused_when_the_workflow_is_defined(kind):
    with pytest.raises(InvalidInput, match=re.escape(f"effect kind {kind!r}") + ".*must match"):
        Workflow("w", [Step("notify", lambda ctx: 1, effects=(kind,))])


@pytest.mark.parametrize("kind", ["email", "_x", "order.shipped", "email-v2", "E" + "9" * 99])
def test_identifier_kinds_are_accepted(kind):
    assert Workflow("w", [Step("notify", lambda ctx: 1, effects=(kind,))]).steps[0].effects == (kind,)


def test_split_refuses_a_key_without_a_kind():
    for key in ("no-colon", "job:", ":kind", "job:b c"):
        with pytest.raises(InvalidInput, match="is not '<job id>:<kind>'"):
            split_idempotency_key(key)


class Collect:
    def __init__(self):
        self.keys = []

    def send(self, key, kind, payload):
        self.keys.append(key)


def test_a_stored_row_whose_kind_holds_a_colon_is_never_sent_and_says_why(store, clock):
    """Rows as an older engine wrote them: the colliding pair of the issue, and a kind that is no
    identifier but holds no colon (its key is unambiguous, unchanged, and still sent)."""
    for job_id, kind in (("a", "b:c"), ("a:b", "c"), ("d", "send email")):
        store.conn.execute(
            "INSERT INTO outbox (job_id, kind, payload, created, next_attempt_at) VALUES (?, ?, '{}', ?, ?)",
            (job_id, kind, clock.now(), clock.now()),
        )
    store.conn.commit()
    receiver = Collect()
    report = send_outbox(store, receiver, clock=clock)
    assert (report.sent, report.failed) == (2, 1)
    assert sorted(receiver.keys) == ["a:b:c", "d:send email"]  # the key a:b:c went to job a:b's effect only
    rows = store.conn.execute("SELECT job_id, kind, sent_at, last_error FROM outbox ORDER BY id").fetchall()
    job_id, kind, sent_at, last_error = rows[0]
    assert sent_at is None
    assert last_error.startswith("InvalidInput: effect kind 'b:c' holds ':'")
    assert "not sent" in last_error and "UPDATE outbox SET kind" in last_error
    assert all(row[2] is not None for row in rows[1:])
