"""Connections racing for the same rows: one wins, the others change nothing; a lock wait is StoreBusy."""

import os
import signal
import threading

import pytest

from engine import StoreBusy

from .conftest import rows

RACERS = 6


def starts(workflow):
    return {s: workflow.next_step(s).working_state for s in workflow.ready_states}


def race(stores, action):
    """Run ``action(store)`` on every store at the same instant, each in its own thread."""
    barrier = threading.Barrier(len(stores))
    results = [None] * len(stores)
    errors = []

    def run(i, store):
        try:
            barrier.wait(timeout=10)
            results[i] = action(store)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, s)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    return results


def test_connections_claiming_at_the_same_instant_get_each_job_once(open_db, store, workflow, clock):
    store.submit_many([("a", {"source": "a"}), ("b", {"source": "b"})], now=clock.now())
    claims = race([open_db() for _ in range(RACERS)], lambda s: s.claim(f"w{id(s)}", now=clock.now(), lease_s=60, starts=starts(workflow)))
    won = sorted(c.job_id for c in claims if c is not None)
    assert won == ["a", "b"]
    assert {job.lease_token for job in store.jobs()} == {1}


def test_concurrent_human_moves_on_one_job_succeed_once(open_db, store, clock):
    store.submit("a", {"source": "a"}, now=clock.now())
    moved = race(
        [open_db() for _ in range(RACERS)],
        lambda s: s.human_move("a", from_state="pending", to_state="cancelled", next_run_at=None, now=clock.now()),
    )
    assert moved.count(True) == 1
    assert store.get("a").state == "cancelled"


def test_a_claim_and_a_cancel_racing_for_a_pending_job_do_not_both_win(open_db, store, workflow, clock):
    for i in range(10):
        store.submit(f"j{i}", {"source": "x"}, now=clock.now())
        claimer, canceller = open_db(), open_db()
        claim, cancelled = race(
            [claimer, canceller],
            lambda s: s.claim("w", now=clock.now(), lease_s=60, starts=starts(workflow)) if s is claimer
            else s.human_move(f"j{i}", from_state="pending", to_state="cancelled", next_run_at=None, now=clock.now()),
        )
        state = store.get(f"j{i}").state
        assert (claim is not None) != bool(cancelled)
        assert state == ("fetching" if claim is not None else "cancelled")


def test_a_write_that_cannot_get_its_lock_raises_store_busy_and_writes_nothing(backend, open_db, store, clock):
    store.submit("a", {"source": "a"}, now=clock.now())
    impatient = open_db(busy_timeout_s=0.2)
    with backend.write_lock_held("a"):
        with pytest.raises(StoreBusy, match="nothing was written|locked"):
            impatient.human_move("a", from_state="pending", to_state="cancelled", next_run_at=None, now=clock.now())
    assert store.get("a").state == "pending"
    assert impatient.human_move("a", from_state="pending", to_state="cancelled", next_run_at=None, now=clock.now())


class DieWhileIterated(dict):
    """Effects whose iteration SIGKILLs the process: a death inside complete()'s open transaction."""

    def items(self):
        os.kill(os.getpid(), signal.SIGKILL)
        return super().items()


def test_a_worker_killed_inside_its_transaction_leaves_nothing_and_holds_no_lock(db_url, open_db, store, workflow, clock):
    store.submit("a", {"source": "a"}, now=clock.now())
    claim = store.claim("w1", now=clock.now(), lease_s=60, starts=starts(workflow))
    pid = os.fork()
    if pid == 0:  # the child: its own connection, killed after the job UPDATE and memo INSERT ran
        try:
            child = type(store)(db_url)
            child.complete(
                claim, step="fetch", from_state="fetching", done_state="fetched", output_json="{}", cost_usd=1.0,
                effects=DieWhileIterated(delivery="{}"), next_state="extracting", release_at=None,
                lease_until=clock.now() + 60, result_json=None, write_memo=True, now=clock.now(),
            )
        finally:
            os._exit(3)  # reached only if the kill did not happen
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    job = open_db().get("a")
    assert (job.state, job.lease_token) == ("fetching", claim.token)
    assert store.memos("a") == {}
    assert rows(store, "SELECT COUNT(*) AS n FROM outbox") == [{"n": 0}]
    assert store.heartbeat(claim, state="fetching", until=clock.now() + 60, now=clock.now())  # no lock left behind
