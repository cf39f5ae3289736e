"""A family's template: the files its preparation left, which every run of the family copies.

:func:`chaos.core.prepare.prepare` runs a family's setup once into its template directory; each
point (its doomed iteration, recording, recovery) then starts from a fresh copy in a directory of
its own, so that no point sees what another did. An adapter whose databases are on a server
(PostgreSQL) makes the template database and each copy itself (``new_scenario_db``), and the
harness drops them once they have served.
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING

from chaos.core.scenario import Family, Run

if TYPE_CHECKING:
    from chaos.core.target import Target

__all__ = ["copy_template", "fresh_run", "discard"]


def copy_template(family: Family, directory: str, adapter: Target | None = None) -> str | None:
    """A fresh copy of the template in a new directory (a WAL file is copied, never the -shm).

    Returns the copy's database when the adapter made it (``new_scenario_db``, e.g. PostgreSQL's
    ``CREATE DATABASE ... TEMPLATE``: the run owns it and drops it), else None: the files are it.
    """
    if os.path.exists(directory):
        shutil.rmtree(directory)
    os.makedirs(directory)
    names = ("world.db", "world.db-wal") if family.template_db else ("engine.db", "engine.db-wal", "world.db", "world.db-wal")
    for name in names:
        source = os.path.join(family.template, name)
        if os.path.exists(source):
            shutil.copyfile(source, os.path.join(directory, name))
    server = adapter.server if adapter is not None else None
    if family.template_db and server is not None:
        return server.new_scenario_db(family.template_db, directory)
    return None


def fresh_run(adapter: Target, family: Family, directory: str, seed: int) -> Run:
    """A new run on a fresh copy of the family's template."""
    db = copy_template(family, directory, adapter)
    run = Run(adapter, directory, family.clock_after_setup, seed, family.scenario, db, drop=db is not None)
    run.submitted = family.submitted
    return run


def discard(adapter: Target, family: Family) -> None:
    """Drop a family's template database, where the adapter made one (its files go with the workdir)."""
    server = adapter.server
    if family.template_db and server is not None:
        server.drop_db(family.template_db)
        family.template_db = ""
