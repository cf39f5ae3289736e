"""``python -m engine``: a thin command line over the library calls.

Commands: ``states``, ``submit``, ``work``, ``send``, ``status``, ``requeue``, ``resolve``,
``cancel``, ``replay``, ``example``. Each prints what it did; operating errors exit with status 2
and one line that says what is wrong and what to do.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import sys
import time
from typing import Any, Sequence

from .arguments import OneLineParser, positive_int
from ._clock import SystemClock
from ._errors import EngineError
from ._http import HttpSender
from ._human import RESOLUTIONS, cancel, requeue, resolve
from ._inputs import check_job_id, payload_json
from ._open import open_store
from ._opening import sqlite_file
from ._outbox import send_outbox
from ._outcome import Outcome
from ._queries import format_status, status
from ._replay import replay
from .terminal import one_line, printable, stdout_closed
from ._worker import Worker
from ._workflow import Workflow

__all__ = ["main", "COMMANDS"]

COMMANDS = ("states", "submit", "work", "send", "status", "requeue", "resolve", "cancel", "replay", "example")
EXAMPLE_JOBS_DEFAULT = 20
EXAMPLE_JOBS_MAX = 100_000
# The commands that may create a database file; every other one refuses a path where none exists.
CREATING_COMMANDS = ("submit", "example")
# The commands that only read: they open the database read-only, so that they never create a file,
# write a schema into one that is empty, or leave a journal beside one that is not a database.
READ_ONLY_COMMANDS = ("status", "replay")
# `work` on a database that keeps failing (disk full, I/O error): it pauses, doubling each time,
# and gives up after this many failures in a row, saying what the database reported.
STORE_FAILURES_MAX = 5
STORE_FAILURE_PAUSE_S = 0.2
WORKFLOW_HELP = "workflow as MODULE:ATTR (a Workflow or a function returning one); default: engine:default_workflow"


def load_workflow(spec: str) -> Workflow:
    """Import ``MODULE:ATTR`` and return the Workflow it names (calling it if it is a factory)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr or module_name.startswith("."):
        raise EngineError(f"workflow {spec!r} must look like MODULE:ATTR (an absolute module), e.g. engine:default_workflow")
    try:
        target: Any = getattr(importlib.import_module(module_name), attr)
    except (Exception, SystemExit) as exc:  # whatever importing someone else's module raises (sys.exit too), it is one line here
        why = f"importing it called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else f"{type(exc).__name__}: {exc}"
        raise EngineError(f"cannot load workflow {spec!r}: {why}; pass MODULE:ATTR naming an engine.Workflow") from exc
    # Only a function written in Python is called, and only once it is known to take no arguments:
    # calling whatever the spec names first would run it (os:abort ended the process with SIGABRT).
    if inspect.isfunction(inspect.unwrap(target)):  # a function, or one a decorator wraps (functools.cache)
        needed = [p.name for p in inspect.signature(target).parameters.values()
                  if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if needed:
            raise EngineError(f"workflow {spec!r} is a function that needs arguments ({', '.join(needed)}); name an "
                              "engine.Workflow or a function that takes no arguments and returns one")
        try:
            workflow = target()
        except (Exception, SystemExit) as exc:
            raise EngineError(
                f"workflow {spec!r}: calling it failed ({type(exc).__name__}: {exc}); name an engine.Workflow "
                "or a function that takes no arguments and returns one"
            ) from exc
    else:
        workflow = target
    if not isinstance(workflow, Workflow):
        what = "a built-in function" if inspect.isbuiltin(workflow) else type(workflow).__name__
        raise EngineError(f"{spec!r} gave {what}, not an engine.Workflow; name a Workflow or a function returning one")
    return workflow


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m engine", description="Operate a crashgate engine database.")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str, *, db: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--workflow", default="engine:default_workflow", help=WORKFLOW_HELP)
        if db:
            p.add_argument("--db", required=True, help="database path, sqlite:///path, a SQLite file: URI, or postgresql://user@host/db")
        return p

    p = command("states", "print the workflow's state table", db=False)
    p.add_argument("--json", action="store_true", help="print {state: [next, ...]} as JSON")
    p = command("submit", "submit a job (the id is the idempotency key)")
    p.add_argument("job")
    p.add_argument("payload", help="the payload as JSON text")
    p = command("work", "run a worker until no job is due")
    p.add_argument("--worker-id", default=f"worker-{os.getpid()}")
    p.add_argument("--lease-s", type=float, default=120.0)
    p = command("send", "one outbox pass: POST due effects to a receiver")
    p.add_argument("--url", required=True, help="the receiver; it must dedupe on the Idempotency-Key header")
    p = command("status", "the four operating queries")
    p.add_argument("--json", action="store_true")
    p = command("requeue", "send a failed job back to the state before its failed step")
    p.add_argument("job")
    p = command("resolve", "settle a needs_human job")
    p.add_argument("job")
    p.add_argument("action", choices=RESOLUTIONS)
    p = command("cancel", "cancel a pending job")
    p.add_argument("job")
    p = command("replay", "re-run one step with its stored input and diff the output; changes nothing")
    p.add_argument("job")
    p.add_argument("step")
    p = command("example", "create a small example database, run it, and print its status", db=False)
    p.add_argument("--db", default="example.db", help="where to create it (default: example.db)")
    p.add_argument("--jobs", type=positive_int, default=EXAMPLE_JOBS_DEFAULT, help=f"jobs to submit, 1 to {EXAMPLE_JOBS_MAX}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except EngineError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return stdout_closed()
    except KeyboardInterrupt:  # Ctrl-C: an open transaction is rolled back; a job held is taken over once its lease expires
        print("interrupted", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace) -> int:
    workflow = load_workflow(args.workflow)
    clock = SystemClock()
    if args.command == "states":
        table = workflow.to_json()
        print(json.dumps(table, indent=2) if args.json else "\n".join(f"{s:<16} -> {', '.join(n) or '(terminal)'}" for s, n in table.items()))
        return 0
    _check_db(args.db)
    if args.command == "example":
        if args.jobs > EXAMPLE_JOBS_MAX:
            raise EngineError(f"--jobs {args.jobs} is more than an example needs; pass at most {EXAMPLE_JOBS_MAX}")
        if args.db.startswith(("postgresql://", "postgres://")):  # a server's database is never a new one
            raise EngineError(f"--db {printable(args.db.split('@')[-1])!r}: example creates a new SQLite database and runs its own "
                              "jobs and outbox in it; pass the path of a file that does not exist yet")
        if os.path.lexists(sqlite_file(args.db)):  # its jobs would mix with real ones, its sender drain their effects
            raise EngineError(f"--db {printable(args.db)!r} exists; example creates a new database and runs its own jobs "
                              "and outbox in it: pass a path where there is no file yet")
        return _example(args, workflow)
    payload = None
    if args.command == "submit":  # checked before the database is opened, so a bad submit creates no file
        try:
            payload = json.loads(args.payload)
        except (ValueError, RecursionError) as exc:
            raise EngineError(f"payload {args.payload[:80]!r} is not JSON ({exc}); quote it, e.g. '{{\"source\": \"doc-1\"}}'") from None
        payload_json(check_job_id(args.job), payload)
    sender = HttpSender(args.url) if args.command == "send" else None  # a malformed url is refused before the database opens
    store = open_store(args.db, workflow=workflow.name, create=args.command in CREATING_COMMANDS,
                       read_only=args.command in READ_ONLY_COMMANDS)
    if args.command == "submit":
        print(_job_line(store.submit(args.job, payload, now=clock.now())))
    elif args.command == "work":
        return _work(args, store, workflow, clock)
    elif args.command == "send":
        report = send_outbox(store, sender, clock=clock)
        print(f"sent {report.sent}, failed {report.failed}")
    elif args.command == "status":
        report = status(store, now=clock.now(), settled_states=workflow.terminal_states | workflow.parked_states)
        print(json.dumps(report, indent=2, sort_keys=True, allow_nan=False) if args.json else format_status(report))
    elif args.command == "requeue":
        print(_job_line(requeue(store, workflow, args.job, now=clock.now())))
    elif args.command == "resolve":
        print(_job_line(resolve(store, workflow, args.job, args.action, now=clock.now())))
    elif args.command == "cancel":
        print(_job_line(cancel(store, workflow, args.job, now=clock.now())))
    elif args.command == "replay":
        result = replay(store, workflow, args.job, args.step, clock=clock)
        print(f"replayed {printable(args.step)} of {printable(args.job)}: " + ("same output as stored" if result.same else "output differs"))
        if not result.same:
            print(printable_lines(result.diff))
    return 0


def _work(args: argparse.Namespace, store: Any, workflow: Workflow, clock: SystemClock) -> int:
    """Run jobs until none is due; on a database that keeps failing, pause, then give up in one line."""
    worker = Worker(store, workflow, worker_id=args.worker_id, clock=clock, lease_s=args.lease_s)
    counts: dict[str, int] = {}
    failures = 0
    while (result := worker.run_once()).outcome != Outcome.IDLE:
        counts[result.outcome] = counts.get(result.outcome, 0) + 1
        if result.outcome != Outcome.UNAVAILABLE:
            failures = 0
            continue
        failures += 1
        if failures >= STORE_FAILURES_MAX:
            print(json.dumps(counts, sort_keys=True))
            raise EngineError(
                f"the database failed {failures} times in a row, last: {result.error}; nothing was lost (every job "
                "keeps its state); fix the cause, then run `work` again"
            )
        time.sleep(STORE_FAILURE_PAUSE_S * 2 ** (failures - 1))
    print(json.dumps(counts, sort_keys=True))
    return 0


def _check_db(db: str) -> None:
    """A command's database must outlive it: an in-memory one would take every change with it."""
    if db.startswith(("postgresql://", "postgres://")):
        return
    path = sqlite_file(db)
    if path in ("", ":memory:") or path.startswith("file::memory:") or "mode=memory" in path:
        raise EngineError(f"--db {printable(db)!r} is a database that keeps nothing once the command ends; "
                          "pass a file path, e.g. --db app.db, or postgresql://...")


def _example(args: argparse.Namespace, workflow: Workflow) -> int:
    clock = SystemClock()
    store = open_store(args.db, workflow=workflow.name)
    store.submit_many(((f"doc-{i}", {"source": f"doc-{i}"}) for i in range(args.jobs)), now=clock.now())
    worker = Worker(store, workflow, worker_id="example", clock=clock)
    while worker.run_once().outcome != Outcome.IDLE:
        pass

    class Collect:
        def __init__(self) -> None:
            self.keys: list[str] = []

        def send(self, key: str, kind: str, payload: Any) -> None:
            self.keys.append(key)

    collected = Collect()
    while send_outbox(store, collected, clock=clock).sent:
        pass
    print(f"example database {printable(args.db)}: {args.jobs} jobs submitted, {len(collected.keys)} effects delivered\n")
    print(format_status(status(store, now=clock.now(), settled_states=workflow.terminal_states | workflow.parked_states)))
    return 0


def _job_line(job: Any) -> str:
    line = f"{job.id}: {job.state}" + (f" (last error: {job.last_error})" if job.last_error else "")
    return printable(line)


def printable_lines(text: str) -> str:
    """``text`` with each line made safe for a terminal (the line breaks themselves are kept)."""
    return "\n".join(printable(line) for line in text.split("\n"))
