"""The models an adapter declares in one word, each a ``StrEnum`` whose first member is the default.

``iteration`` (what one iteration of the engine's loop is), ``recovery`` (how a dead worker's work
comes back), ``time_source`` (where the engine reads the time), ``connections`` (where its SQLite
connections are), ``engines_per_process`` (how many of its engines one process holds),
``create_with`` (what an engine on SQL's ``create_schema`` is given) and ``receiver`` (how the
effect receiver applies a delivery). Each is read once, by
:func:`chaos.core.declared.declared`, when a target is loaded (:class:`chaos.core.target.Target`),
which refuses a word it does not know with the words allowed and what each means. This module
imports no other module of the harness: the contract (:mod:`chaos.adapter`) and every phase below
it stand on it.

>>> class Restarting:
...     name = "mine"
...     recovery = "restart"
>>> recovery_model(Restarting()), iteration_model(Restarting())
(<Recovery.RESTART: 'restart'>, <Iteration.ONE_CALL: 'one-call'>)
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from chaos.core.declared import declared

__all__ = [
    "Connections", "CreateWith", "EnginesPerProcess", "ITERATIONS", "ITERATION_CALLS_MAX", "Iteration", "RECEIVERS", "RECOVERIES",
    "Receiver", "Recovery", "TimeSource", "connections_model", "create_with_model", "engines_per_process", "iteration_model", "receiver_model",
    "recovery_model", "time_source",
]


class Iteration(StrEnum):
    ONE_CALL = "one-call"
    UNTIL_IDLE = "until-idle"


ITERATIONS = tuple(i.value for i in Iteration)
ITERATION_CALLS_MAX = 200  # far more steps than any job has; a loop past it never goes idle


def iteration_model(adapter: Any) -> Iteration:
    """What one iteration of ``adapter``'s engine is: its ``iteration`` ("one-call", the default,
    or "until-idle")."""
    return declared(adapter, "iteration", Iteration, {
        Iteration.ONE_CALL: "one run_once is a job's whole run",
        Iteration.UNTIL_IDLE: "run_once is called until it answers 'idle' or 'busy'",
    })


class Recovery(StrEnum):
    LEASE_EXPIRY = "lease-expiry"
    RESTART = "restart"
    AT_OPEN = "at-open"


RECOVERIES = tuple(r.value for r in Recovery)


def recovery_model(adapter: Any) -> Recovery:
    """How ``adapter``'s engine recovers a dead worker's work: its ``recovery`` ("lease-expiry",
    the default, "restart" or "at-open")."""
    return declared(adapter, "recovery", Recovery, {
        Recovery.LEASE_EXPIRY: "a new worker takes over once the lease has expired",
        Recovery.RESTART: "the dead worker restarts under its own identity",
        Recovery.AT_OPEN: "the next process to open the engine recovers the work",
    })


class TimeSource(StrEnum):
    """Where an engine reads the time: the clock ``open()`` passes it, or the machine's."""

    PASSED = "passed"
    WALL = "wall"


def time_source(adapter: Any) -> TimeSource:
    """What ``adapter``'s engine reads the time from: its ``time_source`` ("passed", the default,
    or "wall": it calls ``time.time()``)."""
    return declared(adapter, "time_source", TimeSource, {
        TimeSource.PASSED: "the engine reads the clock open() passes it",
        TimeSource.WALL: "the engine calls time.time(); in each worker's process the harness makes it answer its clock",
    })


class Connections(StrEnum):
    """Where the harness finds an engine's SQLite connections."""

    SESSION = "session"
    POOL = "pool"


def connections_model(adapter: Any) -> Connections:
    """How ``adapter``'s sessions reach their database: ``connections = "session"`` (the default:
    the session's ``connection()``, where it offers one) or ``"pool"`` (the library opens its own)."""
    return declared(adapter, "connections", Connections, {
        Connections.SESSION: "the session's connection() is its one connection",
        Connections.POOL: "the library opens its own connections (a pool); in each worker's process the harness hooks "
                          "sqlite3.connect and gives every connection opened on the engine's database the session's writer, "
                          "its statement tracing and its faults",
    })


class EnginesPerProcess(StrEnum):
    """How many of an engine's instances one process can hold: a session each (the reference
    engine), or one for the whole process (DBOS keeps one DBOS a process, launched once)."""

    MANY = "many"
    ONE = "one"


def engines_per_process(adapter: Any) -> EnginesPerProcess:
    """What ``adapter`` declares as ``engines_per_process``: where it is ``"one"``, a second
    worker never runs in a process that already opened one (it would run on the first one's engine)."""
    return declared(adapter, "engines_per_process", EnginesPerProcess, {
        EnginesPerProcess.MANY: "each session opens an engine of its own, so two workers can share a process",
        EnginesPerProcess.ONE: "a process holds one engine (a library's global instance): a second worker runs in a fresh "
                               "process of its own",
    })


class CreateWith(StrEnum):
    """What an adapter's ``create_schema`` is given: a connection (the default), or the database's path."""

    CONNECTION = "connection"
    PATH = "path"


def create_with_model(adapter: Any) -> CreateWith:
    """What ``adapter`` declares as ``create_with``: ``"path"`` where its ``create_schema`` opens
    the database itself from its path (it then runs in a child process of its own)."""
    return declared(adapter, "create_with", CreateWith, {
        CreateWith.CONNECTION: "create_schema(conn) is given an open sqlite3 connection",
        CreateWith.PATH: "create_schema(db_path) is given the database file's path and runs in a child process of its own",
    })


class Receiver(StrEnum):
    """How the world's receiver applies deliveries: ``dedupes`` (once per key) or ``strict`` (every one)."""

    DEDUPES = "dedupes"
    STRICT = "strict"


RECEIVERS = tuple(r.value for r in Receiver)


def receiver_model(adapter: Any) -> Receiver:
    """The receiver ``adapter``'s engine sends to: its ``receiver`` ("dedupes", the default, or
    "strict", which applies every delivery of a key again)."""
    return declared(adapter, "receiver", Receiver, {Receiver.DEDUPES: "the receiver applies each effect key once",
                                                    Receiver.STRICT: "every delivery is applied"})
