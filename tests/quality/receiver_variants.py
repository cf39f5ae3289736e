"""The reference engine declared to a strict receiver (one that does not dedupe by the effect key).

It sends its effects at least once, by design: a crash between a delivery and the row marked sent
re-sends the effect, which a strict receiver applies again and the gate must report. (tinyflow's
own such declaration is ``examples/minimal_engine/crash.py:strict_adapter``.) A module of its own,
so that the matrix's worker processes can import it.
"""

from __future__ import annotations

from chaos import ReferenceAdapter

__all__ = ["StrictReference"]


class StrictReference(ReferenceAdapter):
    """The reference engine, at-least-once by design, declared as promising exactly-once effects."""

    receiver = "strict"
