"""How an engine recovers the work of a worker that died: its lease expires, it restarts with the
same identity, or the next process to open the engine recovers it.

An adapter declares ``recovery`` (default ``"lease-expiry"``), and the harness recovers as that
engine would be recovered in production:

- ``"lease-expiry"``: time passes the dead worker's lease (``lease_s`` and a second), then a worker
  of a new identity drains the system (the reference engine; most engines with leases).
- ``"restart"``: every worker that died starts again under its own identity, with no time passing
  first, then drains the system (engines that recover a worker's unfinished work when that worker,
  by its executor or host id, comes back: a job held by a worker that never returns stays held).
- ``"at-open"``: no time passes; a worker of a new identity opens the engine and drains it (engines
  that put unfinished work back when a process opens the store).

>>> class Restarting:  # a target whose adapter declares recovery = "restart"
...     recovery = Recovery.RESTART
...     lease_s = 30.0
>>> recovery_wait_s(Restarting()), recovering_workers(Restarting(), ["w-doomed"], "w-recover")
(0.0, ['w-doomed'])
>>> class Leased:
...     recovery = Recovery.LEASE_EXPIRY
...     lease_s = 30.0
>>> recovery_wait_s(Leased()), recovering_workers(Leased(), ["w-doomed"], "w-recover")
(31.0, ['w-recover'])
"""

from __future__ import annotations

from typing import Iterable, TYPE_CHECKING

from chaos.core.models import RECOVERIES, Recovery, recovery_model

if TYPE_CHECKING:
    from chaos.core.target import Target

__all__ = ["RECOVERIES", "Recovery", "recovering_workers", "recovery_model", "recovery_wait_s"]


def recovery_wait_s(target: Target) -> float:
    """The time that passes between a worker's death and its recovery: past the lease for an
    engine that recovers by lease expiry, none for the others."""
    if target.recovery is Recovery.LEASE_EXPIRY:
        return float(target.lease_s) + 1.0
    return 0.0


def recovering_workers(target: Target, dead: Iterable[str], fresh: str) -> list[str]:
    """The identities that recover, in order, after the workers ``dead`` died: each of them again
    for an engine that recovers by restart (the last one then drains), else one new worker
    ``fresh``."""
    if target.recovery is Recovery.RESTART:
        return list(dict.fromkeys(dead)) or [fresh]
    return [fresh]
