"""Damaged rows: what the engine never writes is quarantined, and the loop goes on with the others.

A payload that is not JSON, a memo output that is not JSON, a state the table does not know: each
parks its job in a failed state with a ``last_error`` that names the damage and the repair, and the
next iteration processes the next job. Nothing here is retried until a person repairs the row.
"""

import pytest

from engine import DamagedRow, requeue


def _damage(store, sql):
    store.conn.execute(sql)


def test_a_payload_that_is_not_json_is_quarantined_and_the_next_job_still_runs(store, clock, make_worker, workflow):
    store.submit("bad", {"source": "bad"}, now=clock.now())
    store.submit("good", {"source": "good"}, now=clock.now() + 1)
    _damage(store, "UPDATE job_payload SET payload = '{\"source\": \"bad' WHERE job_id = 'bad'")
    clock.advance(2)
    worker = make_worker()
    first = worker.run_once()
    assert (first.outcome, first.job_id, first.state) == ("quarantined", "bad", "failed_fetch")
    second = worker.run_once()
    assert (second.outcome, second.job_id) == ("done", "good")
    error = store.conn.execute("SELECT last_error FROM job WHERE id = 'bad'").fetchone()[0]
    assert error.startswith("quarantined: payload of job 'bad' is not valid JSON (")
    assert "repair the row with the payload that was submitted, then requeue the job" in error


def test_a_job_whose_payload_row_is_gone_is_quarantined_and_reported_as_missing_everywhere(store, clock, make_worker, workflow):
    store.submit("bad", {"source": "bad"}, now=clock.now())
    store.submit("good", {"source": "good"}, now=clock.now() + 1)
    _damage(store, "DELETE FROM job_payload WHERE job_id = 'bad'")
    with pytest.raises(DamagedRow, match="payload of job 'bad' is missing"):
        store.get("bad")
    with pytest.raises(DamagedRow, match=r"INSERT INTO job_payload \(job_id, payload\) VALUES \('bad', "):
        store.submit("bad", {"source": "bad"}, now=clock.now())  # an idempotent resubmit cannot compare
    clock.advance(2)
    worker = make_worker()
    first = worker.run_once()
    assert (first.outcome, first.job_id, first.state) == ("quarantined", "bad", "failed_fetch")
    assert (worker.run_once().outcome, "good") == ("done", "good")
    error = store.conn.execute("SELECT last_error FROM job WHERE id = 'bad'").fetchone()[0]
    assert error.startswith("quarantined: payload of job 'bad' is missing (job_payload has no row for it); insert the payload")
    # The repair the message names, then a requeue: the job finishes.
    _damage(store, """INSERT INTO job_payload (job_id, payload) VALUES ('bad', '{"source":"bad"}')""")
    requeue(store, workflow, "bad", now=clock.now())
    assert worker.run_once().outcome == "done"


def test_a_memo_row_that_does_not_parse_quarantines_its_job_with_the_repair_in_last_error(store, clock, make_worker, workflow):
    store.submit("doc-1", {"source": "doc-1"}, now=clock.now())
    worker = make_worker()
    store.claim("w0", now=clock.now(), lease_s=120, starts={"pending": "fetching"})
    # A job resumed after its worker died: fetch's memo is there, and it was garbled since.
    store.conn.execute("INSERT INTO step_result (job_id, step, output, cost, at) VALUES ('doc-1', 'fetch', '{\"text\": ', 0, 0)")
    clock.advance(121)
    result = worker.run_once()
    assert (result.outcome, result.state) == ("quarantined", "failed_fetch")
    error = store.conn.execute("SELECT last_error FROM job WHERE id = 'doc-1'").fetchone()[0]
    assert "memo row of step 'fetch' of job 'doc-1' is not valid JSON" in error
    assert "DELETE FROM step_result WHERE job_id = 'doc-1' AND step = 'fetch'" in error
    with pytest.raises(DamagedRow):
        store.memos("doc-1")
    # The repair the message names, then a requeue: the job finishes.
    store.conn.execute("DELETE FROM step_result WHERE job_id = 'doc-1' AND step = 'fetch'")
    requeue(store, workflow, "doc-1", now=clock.now())
    assert worker.run_once().outcome == "done"


def test_a_state_the_table_does_not_know_is_quarantined_and_a_requeue_skips_the_memoised_steps(store, clock, make_worker, workflow):
    store.submit("doc-1", {"source": "doc-1"}, now=clock.now())
    worker = make_worker()
    assert worker.run_once().outcome == "done"
    _damage(store, f"UPDATE job SET state = 'garbled', next_run_at = {clock.now()} WHERE id = 'doc-1'")
    result = worker.run_once()
    assert (result.outcome, result.state) == ("quarantined", "failed_fetch")
    error = store.conn.execute("SELECT last_error FROM job WHERE id = 'doc-1'").fetchone()[0]
    assert error == "quarantined: state 'garbled' is not a working state of workflow 'reference'"
    requeue(store, workflow, "doc-1", now=clock.now())
    again = worker.run_once()
    assert (again.outcome, again.state, again.steps_run, again.steps_skipped) == ("done", "delivered", 0, 4)


def test_a_settled_job_made_claimable_from_outside_is_released_without_moving(store, clock, make_worker):
    store.submit("doc-1", {"source": "doc-1"}, now=clock.now())
    worker = make_worker()
    assert worker.run_once().outcome == "done"
    _damage(store, f"UPDATE job SET next_run_at = {clock.now()} WHERE id = 'doc-1'")
    result = worker.run_once()
    assert (result.outcome, result.state) == ("quarantined", "delivered")
    assert worker.run_once().outcome == "idle"
    assert store.get("doc-1").state == "delivered"
