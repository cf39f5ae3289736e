"""``python -m chaos demo``: workers killed at random while 1,000 documents go through; nothing lost.

The whole point of crashgate in one command. It starts, on loopback, a real HTTP receiver that
dedupes on the ``Idempotency-Key`` header and a document source; submits the documents to the
reference fetch -> extract -> verify -> deliver workflow on a SQLite file; runs worker processes
and the outbox sender; and lets a chaos monkey SIGKILL one of them at random moments and restart
it. At the end it prints the four operating queries, what was spent and wasted, the kills, the
receiver's figures, and the invariant catalog over the whole history. It exits 1 if any
invariant is broken (or the run did not drain, or fewer kills landed than ``--kills-min``).

>>> args = parser().parse_args(["--jobs", "60", "--kill-every", "0.3"])
>>> args.jobs, args.workers, args.kills_min
(60, 2, 10)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Sequence, TextIO

from chaos.fleet.fleet import LEASE_S_DEFAULT, FleetConfig, FleetRun, Progress
from chaos.fleet.settings import check_numbers, check_new_sqlite_path
from chaos.adapters.reference import ReferenceAdapter
from chaos.fleet.trial import CannotPrepare, NotEmpty, Trial, TrialResult

__all__ = ["run_demo", "parser", "add_arguments", "main", "format_result"]

JOBS_DEFAULT = 1000
WORKERS_DEFAULT = 2
KILL_EVERY_S_DEFAULT = 1.0
KILLS_MIN_DEFAULT = 10
TIMEOUT_S_DEFAULT = 600.0
PLAIN_EVERY_S = 2.0  # without a terminal, a progress line this often
VIOLATIONS_SHOWN_MAX = 20

STEP_STATES = ReferenceAdapter().step_states()  # step -> (working state, done state), in order
SETTLED_OTHER = ReferenceAdapter().settled_states() - {"delivered"}

HELP_JOBS = f"documents to submit (default {JOBS_DEFAULT:,})"
HELP_WORKERS = f"worker processes (default {WORKERS_DEFAULT}); one outbox sender process runs besides them"
HELP_KILL_EVERY = f"mean seconds between kills (default {KILL_EVERY_S_DEFAULT}); 0 turns the monkey off"
HELP_KILLS_MIN = f"fail unless at least this many kills land; the monkey speeds up if it lags (default {KILLS_MIN_DEFAULT})"
HELP_SEED = "seed of the kill schedule, the victims and every process's RNG (default 0)"
HELP_DB = "SQLite file to create (must not exist) and keep, with the ledgers next to it in DB-chaos/; default: a temporary directory"
HELP_LEASE = f"lease in seconds: how soon a killed worker's job is taken over (default {LEASE_S_DEFAULT})"
HELP_PLAIN = "print a progress line every few seconds instead of the live display"


DESCRIPTION = " ".join(__doc__.split("\n\n")[1].split())


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--jobs", type=int, default=JOBS_DEFAULT, help=HELP_JOBS)
    p.add_argument("--workers", type=int, default=WORKERS_DEFAULT, help=HELP_WORKERS)
    p.add_argument("--kill-every", type=float, default=KILL_EVERY_S_DEFAULT, metavar="SECONDS", help=HELP_KILL_EVERY)
    p.add_argument("--kills-min", type=int, default=KILLS_MIN_DEFAULT, help=HELP_KILLS_MIN)
    p.add_argument("--seed", type=int, default=0, help=HELP_SEED)
    p.add_argument("--db", help=HELP_DB)
    p.add_argument("--lease", type=float, default=LEASE_S_DEFAULT, metavar="SECONDS", help=HELP_LEASE)
    p.add_argument("--plain", action="store_true", help=HELP_PLAIN)
    return p


def parser() -> argparse.ArgumentParser:
    return add_arguments(argparse.ArgumentParser(prog="python -m chaos demo", description=DESCRIPTION))


def main(argv: Sequence[str] | None = None) -> int:
    return run_demo(parser().parse_args(argv))


def run_demo(args: argparse.Namespace, *, out: TextIO | None = None, receiver_dedupes: bool = True) -> int:
    """Run the demo as the command line would; ``receiver_dedupes=False`` plants a bug (tests)."""
    out = out or sys.stdout
    error = _check(args)
    if error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    temporary = args.db is None
    directory = tempfile.mkdtemp(prefix="crashgate-demo-") if temporary else f"{args.db}-chaos"
    db = os.path.join(directory, "demo.db") if temporary else args.db
    config = FleetConfig(db=db, directory=directory, workers=args.workers, lease_s=args.lease, kill_every_s=args.kill_every,
                         kills_min=args.kills_min, seed=args.seed, timeout_s=TIMEOUT_S_DEFAULT)
    print(_intro(args, db, temporary), file=out, flush=True)
    display = _Display(out, args.jobs, plain=args.plain)
    try:
        with display:
            result = Trial(config, args.jobs, receiver_dedupes=receiver_dedupes).run(display.update)
    except (NotEmpty, CannotPrepare) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # every process was stopped on the way out
        print("interrupted: no verdict", file=sys.stderr)
        return 130
    finally:
        if temporary:
            shutil.rmtree(directory, ignore_errors=True)
    print(format_result(result, replay=_replay(args)), file=out, flush=True)
    return 0 if result.ok else 1


def _check(args: argparse.Namespace) -> str | None:
    error = check_numbers(jobs=args.jobs, workers=args.workers, kill_every=args.kill_every, lease=args.lease)
    if error:
        return error
    if args.kill_every == 0 and args.kills_min > 0:
        return f"--kill-every 0 turns the monkey off, so --kills-min {args.kills_min} cannot be met; pass --kills-min 0"
    if args.db is not None:
        if args.db.startswith(("postgresql://", "postgres://")):
            return "the demo runs on SQLite; for PostgreSQL run: python -m chaos soak --backend postgresql"
        error = check_new_sqlite_path(args.db)
        if error:
            return error
        for path in (args.db, f"{args.db}-chaos"):
            if os.path.exists(path):
                return f"--db {args.db}: {path} exists; the demo judges a whole history, so pass a new path or remove it"
    return None


def _intro(args: argparse.Namespace, db: str, temporary: bool) -> str:
    where = "a temporary SQLite file" if temporary else f"SQLite file {db}"
    monkey = (f"a chaos monkey SIGKILLs a random worker or the sender every ~{args.kill_every:g} s and restarts it"
              if args.kill_every > 0 else "no chaos monkey (--kill-every 0)")
    return (
        f"crashgate demo: {args.jobs:,} documents through fetch -> extract -> verify -> deliver on {where};\n"
        f"{args.workers} worker process{'es' if args.workers != 1 else ''} and 1 outbox sender; {monkey}.\n"
        "The receiver (dedupes on Idempotency-Key) and the document source listen on 127.0.0.1; the paid model\n"
        "writes every call to a ledger outside the database before it returns."
    )


def _replay(args: argparse.Namespace) -> str:
    parts = ["python -m chaos demo", f"--jobs {args.jobs}", f"--workers {args.workers}", f"--kill-every {args.kill_every:g}",
             f"--kills-min {args.kills_min}", f"--seed {args.seed}", f"--lease {args.lease:g}"]
    return " ".join(parts)


def format_result(result: TrialResult, *, replay: str) -> str:
    """The end of a demo run: the four queries, money, kills, the receiver, and the invariants."""
    f = result.verdict.figures
    run = result.run
    receiver = f["receiver"]
    kills = run.kills
    workers_killed = sum(1 for k in kills if k.role == "worker")
    out = ["", "== the four operating queries (python -m engine status) ==", result.status_text, ""]
    out.append(f"throughput:  {f['jobs']:,} jobs settled in {result.settle_s:.1f} s ({result.jobs_per_s:.1f} jobs/s)")
    out.append(f"total spend: ${f['spend_usd']:.4f} over {f['paid_calls']:,} paid model calls "
               f"(${f['memoised_usd']:.4f} of it memoised)")
    out.append(f"wasted spend: ${f['wasted_usd']:.4f} ({_n(f['wasted_calls'], 'call')} paid but not memoised: "
               "in flight when their worker was killed, or retried)")
    out.append(f"kills survived: {len(kills)} ({workers_killed} workers, {len(kills) - workers_killed} sender), "
               f"at least {result.config.kills_min} required; processes that died by themselves: {len(run.unexpected_exits)}")
    out.append(f"receiver:    {receiver['requests']:,} requests received, {receiver['applied']:,} effects applied, "
               f"duplicates applied: {receiver['duplicates_applied']} ({receiver['replies_dropped']} replies dropped on purpose, "
               "so the sender had to send those again)")
    if result.documents:
        out.append(f"documents:   {result.documents['served']:,} served; {_n(result.documents['refused'], 'first fetch', 'first fetches')} "
                   "answered 503, retried with backoff")
    out.append("")
    out.append("== invariants over the whole history ==")
    for name, found in result.verdict.by_invariant().items():
        out.append(f"  {'held    ' if not found else 'VIOLATED'}  {name}" + (f" ({len(found)})" if found else ""))
    shown = result.verdict.violations[:VIOLATIONS_SHOWN_MAX]
    for v in shown:
        out.append(f"  VIOLATION {v}")
    if len(result.verdict.violations) > len(shown):
        out.append(f"  ... and {len(result.verdict.violations) - len(shown)} more")
    for exit_report in run.unexpected_exits[:3]:
        out.append(f"  PROCESS DIED BY ITSELF: {exit_report}")
    if not run.drained:
        out.append(f"  NOT DRAINED: the run stopped after {run.seconds:.0f} s with jobs or outbox rows unfinished")
    if not result.kills_ok:
        out.append(f"  TOO FEW KILLS: {len(kills)} landed, --kills-min is {result.config.kills_min}")
    out.append("")
    if result.ok:
        out.append(f"OK: {len(kills)} kills, {f['lost_jobs']} jobs lost, {f['spend_after_memo']} calls paid after their memo, "
                   f"{f['duplicate_effects']} effects applied twice, {f['illegal_transitions']} illegal transitions.")
    else:
        out.append(f"FAILED (seed {result.config.seed}). Re-run the same schedule with:\n  {replay}\n"
                   "(the seed fixes the gaps between kills, the victims and every RNG; wall-clock timing still differs)")
    return "\n".join(out)


def _n(count: int, one: str, many: str | None = None) -> str:
    return f"{count:,} {one if count == 1 else (many or one + 's')}"


class _Display:
    """Live progress: a bar and per-state counts (rich), or a plain line every few seconds."""

    def __init__(self, out: TextIO, total: int, *, plain: bool) -> None:
        self.out = out
        self.total = total
        self.live: Any = None
        self.last_plain = 0.0
        self.plain = plain or not (hasattr(out, "isatty") and out.isatty())

    def __enter__(self) -> "_Display":
        if not self.plain:
            from rich.console import Console
            from rich.live import Live

            self.console = Console(file=self.out)
            self.live = Live(self._render(None, None), console=self.console, refresh_per_second=8, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def update(self, progress: Progress, run: FleetRun) -> None:
        if self.live is not None:
            self.live.update(self._render(progress, run))
        elif time.monotonic() - self.last_plain >= PLAIN_EVERY_S or progress.done:
            self.last_plain = time.monotonic()
            states = " ".join(f"{s} {n}" for s, n in progress.states.items() if n)
            print(f"[{run.seconds:6.1f}s] {progress.settled:,}/{progress.total:,} settled | {states} | "
                  f"outbox unsent {progress.unsent} | kills {len(run.kills)}", file=self.out, flush=True)

    def _render(self, progress: Progress | None, run: FleetRun | None) -> Any:
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        counts = progress.states if progress else {}
        settled = progress.settled if progress else 0
        head = Table.grid(padding=(0, 1))
        head.add_row(ProgressBar(total=self.total, completed=settled, width=40),
                     f"{settled:,}/{self.total:,} settled", f"{run.seconds if run else 0.0:5.1f}s")
        # One row per step: the state a job waits in before it, and the state while it runs.
        grid = Table.grid(padding=(0, 2))
        ready = "pending"
        for step, (working, done) in STEP_STATES.items():
            grid.add_row(step, ready, f"{counts.get(ready, 0):>6,}", working, f"{counts.get(working, 0):>6,}")
            ready = done
        others = sum(n for state, n in counts.items() if state in SETTLED_OTHER)
        grid.add_row("settled", ready, f"{counts.get(ready, 0):>6,}", "failed/human/cancelled", f"{others:>6,}")
        kills = run.kills if run else []
        last = f"; last: {kills[-1].victim} at {kills[-1].at_s:.1f}s" if kills else ""
        footer = f"kills {len(kills)}{last} | outbox unsent {progress.unsent if progress else 0}"
        return Group(head, grid, footer)
