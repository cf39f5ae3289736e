"""Processes of a fleet open the shared ledgers at once: none may die of "database is locked".

SQLite does not wait for the exclusive lock that switching a file to WAL takes, so every process
setting the journal mode on open raced (a soak's workers died by themselves on a CI machine).
"""

from __future__ import annotations

import multiprocessing
import os

import pytest

from chaos.fleet.services import CallLedger
from engine import open_store

PROCESSES = 6
ROUNDS = 10


def _open_at_once(opener, path: str, barrier, results) -> None:
    barrier.wait()
    try:
        opener(path).close()
        results.put("ok")
    except Exception as exc:  # noqa: BLE001 - the failure is what the test reports
        results.put(repr(exc))


def _open_ledger(path: str) -> CallLedger:
    return CallLedger(path)


def _open_engine(path: str):
    return open_store(path)


@pytest.mark.parametrize("opener", [_open_ledger, _open_engine], ids=["call-ledger", "engine-store"])
def test_processes_opening_one_new_file_at_once_all_succeed(tmp_path, opener):
    context = multiprocessing.get_context("fork")
    failures: list[str] = []
    for round_ in range(ROUNDS):
        path = os.path.join(tmp_path, f"r{round_}.db")
        barrier, results = context.Barrier(PROCESSES), context.Queue()
        children = [context.Process(target=_open_at_once, args=(opener, path, barrier, results)) for _ in range(PROCESSES)]
        for child in children:
            child.start()
        outcomes = [results.get(timeout=60) for _ in children]
        for child in children:
            child.join(timeout=60)
        failures += [o for o in outcomes if o != "ok"]
    assert failures == []
