"""Caller-supplied ids are idempotency keys; bad input is rejected before anything is written."""

import pytest

from engine import IdempotencyConflict, InvalidInput


def test_submitting_the_same_id_and_payload_twice_returns_the_existing_job(store, clock):
    first = store.submit("doc-1", {"source": "a", "n": 1}, now=clock.now())
    clock.advance(10)
    again = store.submit("doc-1", {"n": 1, "source": "a"}, now=clock.now())  # key order is irrelevant
    assert again == first
    assert len(store.jobs()) == 1


def test_the_same_id_with_another_payload_is_a_conflict_naming_the_id_and_nothing_changes(store, clock):
    store.submit("doc-1", {"source": "a"}, now=clock.now())
    before = store.jobs()
    with pytest.raises(IdempotencyConflict, match="'doc-1'.*different payload"):
        store.submit("doc-1", {"source": "b"}, now=clock.now())
    assert store.jobs() == before


@pytest.mark.parametrize("payload", [{1, 2}, object(), {"x": float("nan")}, float("inf"), {"b": b"bytes"}])
def test_a_payload_that_is_not_json_is_rejected_before_a_row_is_written(store, clock, payload):
    with pytest.raises(InvalidInput, match="job 'doc-1'"):
        store.submit("doc-1", payload, now=clock.now())
    assert store.jobs() == []


@pytest.mark.parametrize("job_id", ["", "   ", None, 7, "x" * 201])
def test_a_bad_job_id_is_rejected_with_the_reason(store, clock, job_id):
    with pytest.raises(InvalidInput, match="job id"):
        store.submit(job_id, {}, now=clock.now())
    assert store.jobs() == []


def test_bulk_submit_is_one_transaction_all_or_nothing(store, clock):
    store.submit("doc-2", {"source": "old"}, now=clock.now())
    with pytest.raises(IdempotencyConflict):
        store.submit_many([("doc-1", {}), ("doc-2", {"source": "new"}), ("doc-3", {})], now=clock.now())
    assert [j.id for j in store.jobs()] == ["doc-2"]
    jobs = store.submit_many([(f"bulk-{i}", {"i": i}) for i in range(100)], now=clock.now())
    assert len(jobs) == 100
    assert len(store.jobs()) == 101


def test_submit_is_seen_by_another_connection(open_db, store, clock):
    store.submit("doc-1", {"source": "a"}, now=clock.now())
    other = open_db()
    assert other.get("doc-1").state == "pending"
