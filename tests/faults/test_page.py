"""The page a worker under a fault of the machine shares with the harness: both write it at once
(the worker its note, the harness its flags), and neither may undo what the other wrote."""

from __future__ import annotations

import os

from chaos.hostfaults.worker import Page

ROUNDS = 20_000


def test_the_harness_setting_a_flag_never_undoes_the_note_the_worker_writes_at_the_same_time():
    page = Page()
    page.note(interruptions=[])
    pid = os.fork()
    if pid == 0:  # the worker: notes of changing lengths, as fast as it can
        try:
            for i in range(ROUNDS):
                page.note(interruptions=[["doc-1", "extract"]] * (i % 7))
        finally:
            os._exit(0)
    unreadable = 0
    for i in range(ROUNDS):  # the harness: its flags, as the worker writes
        page.removed = i % 2
        page.offset_s = float(i)
    os.waitpid(pid, 0)
    try:
        page.read()
    except ValueError:
        unreadable += 1
    assert unreadable == 0, "the note's length was put back by a write of another field"
    assert page.read()["interruptions"] == [["doc-1", "extract"]] * ((ROUNDS - 1) % 7)
