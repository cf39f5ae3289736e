"""What a target offers, as ``python -m chaos adapter`` reports it: each capability as resolved.

The adapter-level capabilities of :mod:`chaos.adapter` are read from the resolved target
(:class:`chaos.core.target.Target`: what the adapter offers, or the default); a session's (its
``connection()``, ``claim_only()``, human actions, busy timeout, ``configure_worker``) only from
a session, and the harness's process never opens one: :func:`open_and_ask` creates a database
and opens a session in a forked child, and reports which methods it has.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from typing import TYPE_CHECKING

from chaos.adapter import session_capabilities
from chaos.core.clock import SharedClock
from chaos.core.context import RunContext
from chaos.core.process import Exit, fork
from chaos.core.target import Target, resolve
from chaos.core.world import World

if TYPE_CHECKING:
    from chaos.adapter import Adapter

__all__ = ["open_and_ask", "capability_report"]


def open_and_ask(adapter: Adapter | Target) -> dict[str, bool] | str:
    """The session capabilities of ``adapter`` (a session opened in a child on a scratch
    database), or the error that creating the database or opening the session raised."""
    directory = tempfile.mkdtemp(prefix="crashgate-adapter-")

    def body() -> dict[str, bool]:
        db = os.path.join(directory, "engine.db")
        target = resolve(adapter)
        target.create(db)
        clock = SharedClock(0.0)
        run = RunContext(target, directory, clock, World.for_adapter(directory, clock, target), db)
        session = run.open_session("w-check", random.Random(0))
        try:
            return session_capabilities(session)
        finally:
            session.close()
            run.give_back()

    try:
        ended = fork(body).wait()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if ended.exit is Exit.FINISHED:
        return ended.value
    return ended.error or str(ended.exit)


def capability_report(adapter: Adapter | Target, *, missing_only: bool = False) -> list[str]:
    """One line per capability of the resolved ``adapter`` (or per missing one), sessions included."""
    target = resolve(adapter)
    has = open_and_ask(target)
    if isinstance(has, str):
        failed = [f"  error: opening a session failed: {has.strip().splitlines()[-1] if has.strip() else has}"]
        statuses = target.capabilities()
    else:
        failed, statuses = [], target.capabilities(session_has=has)
    return failed + [s.line() for s in statuses if not (missing_only and s.present)]
