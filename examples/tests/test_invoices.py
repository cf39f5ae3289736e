"""Ordinary tests of the invoice workflow, on a fresh crashgate world (the chaos_world fixture)."""


def test_an_invoice_is_read_extracted_and_one_email_is_sent(chaos_world):
    chaos_world.submit("inv-2024-001")
    chaos_world.drain()
    assert chaos_world.states() == {"inv-2024-001": "notify_done"}
    assert chaos_world.applied() == {"inv-2024-001:email": 1}
    assert chaos_world.check() == []


def test_the_email_waits_for_the_outbox_sender(chaos_world):
    chaos_world.submit("inv-2024-001")
    chaos_world.run()
    assert chaos_world.applied() == {}  # committed with the step, not sent from it
    chaos_world.send()
    assert chaos_world.applied() == {"inv-2024-001:email": 1}
