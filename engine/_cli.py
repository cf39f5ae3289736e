"""``python -m engine``: a thin command line over the library calls.

Commands: ``states``, ``submit``, ``work``, ``send``, ``status``, ``requeue``, ``resolve``,
``cancel``, ``replay``, ``example``. Each prints what it did; operating errors exit with status 2
and one line that says what is wrong and what to do.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Any, Sequence

from ._clock import SystemClock
from ._errors import EngineError
from ._http import HttpSender
from ._human import RESOLUTIONS, cancel, requeue, resolve
from ._outbox import send_outbox
from ._queries import format_status, status
from ._replay import replay
from ._open import open_store
from ._worker import Worker
from ._workflow import Workflow

__all__ = ["main", "COMMANDS"]

COMMANDS = ("states", "submit", "work", "send", "status", "requeue", "resolve", "cancel", "replay", "example")
EXAMPLE_JOBS_DEFAULT = 20
WORKFLOW_HELP = "workflow as MODULE:ATTR (a Workflow or a function returning one); default: engine:default_workflow"


def load_workflow(spec: str) -> Workflow:
    """Import ``MODULE:ATTR`` and return the Workflow it names (calling it if it is a factory)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise EngineError(f"workflow {spec!r} must look like MODULE:ATTR, e.g. engine:default_workflow")
    try:
        target: Any = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise EngineError(f"cannot load workflow {spec!r}: {exc}") from exc
    workflow = target() if callable(target) and not isinstance(target, Workflow) else target
    if not isinstance(workflow, Workflow):
        raise EngineError(f"{spec!r} gave {type(workflow).__name__}, not an engine.Workflow")
    return workflow


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine", description="Operate a crashgate engine database.")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str, *, db: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--workflow", default="engine:default_workflow", help=WORKFLOW_HELP)
        if db:
            p.add_argument("--db", required=True, help="database path, sqlite:///path or postgresql://user@host/db")
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
    p.add_argument("--jobs", type=int, default=EXAMPLE_JOBS_DEFAULT)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    workflow = load_workflow(args.workflow)
    clock = SystemClock()
    if args.command == "states":
        table = workflow.to_json()
        print(json.dumps(table, indent=2) if args.json else "\n".join(f"{s:<16} -> {', '.join(n) or '(terminal)'}" for s, n in table.items()))
        return 0
    if args.command == "example":
        return _example(args, workflow)
    store = open_store(args.db, workflow=workflow.name)
    if args.command == "submit":
        try:
            payload = json.loads(args.payload)
        except ValueError as exc:
            print(f"error: payload {args.payload!r} is not JSON ({exc}); quote it, e.g. '{{\"source\": \"doc-1\"}}'", file=sys.stderr)
            return 2
        print(_job_line(store.submit(args.job, payload, now=clock.now())))
    elif args.command == "work":
        worker = Worker(store, workflow, worker_id=args.worker_id, clock=clock, lease_s=args.lease_s)
        counts: dict[str, int] = {}
        while (result := worker.run_once()).outcome != "idle":
            counts[result.outcome] = counts.get(result.outcome, 0) + 1
        print(json.dumps(counts, sort_keys=True))
    elif args.command == "send":
        report = send_outbox(store, HttpSender(args.url), clock=clock)
        print(f"sent {report.sent}, failed {report.failed}")
    elif args.command == "status":
        report = status(store, now=clock.now(), settled_states=workflow.terminal_states | workflow.parked_states)
        print(json.dumps(report, indent=2, sort_keys=True) if args.json else format_status(report))
    elif args.command == "requeue":
        print(_job_line(requeue(store, workflow, args.job, now=clock.now())))
    elif args.command == "resolve":
        print(_job_line(resolve(store, workflow, args.job, args.action, now=clock.now())))
    elif args.command == "cancel":
        print(_job_line(cancel(store, workflow, args.job, now=clock.now())))
    elif args.command == "replay":
        result = replay(store, workflow, args.job, args.step, clock=clock)
        print(f"replayed {args.step} of {args.job}: " + ("same output as stored" if result.same else "output differs"))
        if not result.same:
            print(result.diff)
    return 0


def _example(args: argparse.Namespace, workflow: Workflow) -> int:
    clock = SystemClock()
    store = open_store(args.db, workflow=workflow.name)
    store.submit_many(((f"doc-{i}", {"source": f"doc-{i}"}) for i in range(args.jobs)), now=clock.now())
    worker = Worker(store, workflow, worker_id="example", clock=clock)
    while worker.run_once().outcome != "idle":
        pass

    class Collect:
        def __init__(self) -> None:
            self.keys: list[str] = []

        def send(self, key: str, kind: str, payload: Any) -> None:
            self.keys.append(key)

    collected = Collect()
    while send_outbox(store, collected, clock=clock).sent:
        pass
    print(f"example database {args.db}: {args.jobs} jobs submitted, {len(collected.keys)} effects delivered\n")
    print(format_status(status(store, now=clock.now(), settled_states=workflow.terminal_states | workflow.parked_states)))
    return 0


def _job_line(job: Any) -> str:
    return f"{job.id}: {job.state}" + (f" (last error: {job.last_error})" if job.last_error else "")
