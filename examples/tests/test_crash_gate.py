"""The CI gate: kill a worker at every line of an invoice's run (and of the outbox sender), then
check every invariant. It fails the build, explained, when a change makes the pipeline crash-unsafe."""

import pytest


@pytest.mark.crash_matrix(families=["clean", "sender"])
def test_invoices_survive_a_crash_at_every_line(crash_matrix):
    report = crash_matrix()  # fails the test with the invariant, the lesson and a replay command
    assert report.points > 0
