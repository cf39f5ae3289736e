"""``python -m chaos soak``: a long, violent run on SQLite or PostgreSQL, then the whole catalog.

Real worker processes and an outbox sender run the reference workflow (a paid model with a small
random latency, documents over loopback HTTP) while a monkey SIGKILLs a random one of them at the
given mean interval and restarts it, until every job is settled and every effect delivered. Then
the invariant catalog runs over the whole history, and the soak prints jobs/s, kills, wasted
calls, and the four figures that must be 0/0/0/0: lost jobs, spend after memo, duplicate applied
effects, illegal transitions. With ``--backend postgresql`` and no ``--db`` it starts a throwaway
server from the installed binaries and removes it afterwards, so one command is enough.

:func:`throughput_rows` measures jobs/s with 1, 2 and 4 workers on each backend, with steps that
wait on I/O (20 ms of model latency per call) and no monkey, for ``python -m benchmarks``.

>>> args = parser().parse_args(["--backend", "postgresql", "--jobs", "500"])
>>> args.backend, args.workers, args.kill_every
('postgresql', 4, 0.2)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from typing import Any, Iterator, Sequence, TextIO

from chaos.fleet.fleet import LEASE_S_DEFAULT, FleetConfig, FleetRun, Progress
from chaos.fleet.settings import check_numbers, check_new_sqlite_path
from chaos.adapters.postgres import is_postgres
from chaos.fleet.trial import CannotPrepare, NotEmpty, Trial, TrialResult
from engine import InvalidInput, PostgresStore
from engine.terminal import one_line

__all__ = ["run_soak", "parser", "add_arguments", "main", "soak_figures", "throughput_rows", "BACKENDS"]

BACKENDS = ("sqlite", "postgresql")
JOBS_DEFAULT = 10_000
WORKERS_DEFAULT = 4
KILL_EVERY_S_DEFAULT = 0.2
TIMEOUT_S_DEFAULT = 3600.0
PROGRESS_EVERY_S = 5.0
VIOLATIONS_SHOWN_MAX = 20
# The benchmark: steps that wait on I/O, so the figure shows how each backend lets workers overlap.
BENCH_LATENCY_MS = (20.0, 20.0)
BENCH_WORKERS = (1, 2, 4)
BENCH_JOBS = 300
BENCH_JOBS_QUICK = 24

HELP_BACKEND = "sqlite (default) or postgresql"
HELP_WORKERS = f"worker processes (default {WORKERS_DEFAULT}); one outbox sender runs besides them"
HELP_JOBS = f"jobs to submit (default {JOBS_DEFAULT:,})"
HELP_KILL_EVERY = f"mean seconds between SIGKILLs of a random process (default {KILL_EVERY_S_DEFAULT}); 0: no monkey"
HELP_KILLS_MIN = "fail unless at least this many kills land; the monkey speeds up if it lags (default 0)"
HELP_DB = ("SQLite file to create, or a postgresql:// URL of an empty database; default: a temporary file, or a "
           "throwaway PostgreSQL server started from the installed binaries")
HELP_JSON = "print the final figures as one JSON object"
HELP_SEED = "seed of the kill schedule, the victims and every process's RNG (default 0)"
HELP_LEASE = f"lease in seconds (default {LEASE_S_DEFAULT})"
HELP_POWER_EVERY = ("mean seconds between power cuts (default 0: none): the database goes on an ext4 image on a loop device, "
                    "and every process dies when the file system is shut down without flushing its journal, then "
                    "everything restarts on what survived; needs root and loop devices")
HELP_SYNCHRONOUS = ("the durability setting under power cuts: SQLite's synchronous (OFF, NORMAL, FULL; default NORMAL) or "
                    "PostgreSQL's synchronous_commit (off, on; default on), with fsync=on")
HELP_TIMEOUT = f"give up (and fail) if the jobs have not all settled after this many seconds (default {TIMEOUT_S_DEFAULT:.0f})"


DESCRIPTION = " ".join(__doc__.split("\n\n")[1].split())


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--backend", choices=BACKENDS, default="sqlite", help=HELP_BACKEND)
    p.add_argument("--workers", type=int, default=WORKERS_DEFAULT, help=HELP_WORKERS)
    p.add_argument("--jobs", type=int, default=JOBS_DEFAULT, help=HELP_JOBS)
    p.add_argument("--kill-every", type=float, default=KILL_EVERY_S_DEFAULT, metavar="SECONDS", help=HELP_KILL_EVERY)
    p.add_argument("--kills-min", type=int, default=0, help=HELP_KILLS_MIN)
    p.add_argument("--db", help=HELP_DB)
    p.add_argument("--json", action="store_true", help=HELP_JSON)
    p.add_argument("--seed", type=int, default=0, help=HELP_SEED)
    p.add_argument("--lease", type=float, default=LEASE_S_DEFAULT, metavar="SECONDS", help=HELP_LEASE)
    p.add_argument("--power-every", type=float, default=0.0, metavar="SECONDS", help=HELP_POWER_EVERY)
    p.add_argument("--synchronous", default=None, metavar="LEVEL", help=HELP_SYNCHRONOUS)
    p.add_argument("--timeout", type=float, default=TIMEOUT_S_DEFAULT, metavar="SECONDS", help=HELP_TIMEOUT)
    return p


def parser() -> argparse.ArgumentParser:
    return add_arguments(argparse.ArgumentParser(prog="python -m chaos soak", description=DESCRIPTION))


def main(argv: Sequence[str] | None = None) -> int:
    return run_soak(parser().parse_args(argv))


def run_soak(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    error = _check(args)
    if error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.power_every > 0:
        return _run_powered(args, out)
    try:
        with _database(args.backend, args.db) as (db, directory):
            _reachable(db)
            config = FleetConfig(db=db, directory=directory, workers=args.workers, lease_s=args.lease,
                                 kill_every_s=args.kill_every, kills_min=args.kills_min, seed=args.seed, timeout_s=args.timeout)
            header = (f"soak on {args.backend}: {args.workers} workers + 1 sender, {args.jobs:,} jobs, "
                      f"a SIGKILL every {args.kill_every:g} s on average (seed {args.seed})")
            result = Trial(config, args.jobs).run(_ProgressLines(sys.stderr, header))
    except (NotEmpty, _Unavailable, CannotPrepare) as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)  # libpq's "connection refused" holds a line break
        return 2
    except KeyboardInterrupt:  # every process (and a throwaway server) was stopped on the way out
        print("interrupted: no verdict", file=sys.stderr)
        return 130
    figures = soak_figures(result, backend=args.backend)
    if args.json:
        print(json.dumps(figures, sort_keys=True), file=out, flush=True)
    else:
        print(format_soak(result, figures), file=out, flush=True)
    return 0 if result.ok else 1


def _run_powered(args: argparse.Namespace, out: TextIO) -> int:
    """The soak with power cuts (chaos.hostfaults.power_runs): its figures add what each cut took."""
    from chaos.hostfaults.power import PowerUnavailable
    from chaos.hostfaults.power_runs import level_setting, powered

    setting = level_setting(args.backend, args.synchronous or ("NORMAL" if args.backend == "sqlite" else "on"))
    try:
        with powered(setting) as p:
            config = FleetConfig(db=p.db, directory=p.ledgers, workers=args.workers, lease_s=args.lease, kill_every_s=args.kill_every,
                                 kills_min=args.kills_min, seed=args.seed, timeout_s=args.timeout, power_every_s=args.power_every,
                                 synchronous=setting.level if args.backend == "sqlite" else None)
            print(f"soak on {setting.label}: {args.workers} workers + 1 sender, {args.jobs:,} jobs, a power cut every "
                  f"{args.power_every:g} s and a SIGKILL every {args.kill_every:g} s on average (seed {args.seed})",
                  file=sys.stderr, flush=True)
            trial = p.trial(config, args.jobs)
            result = trial.run(_ProgressLines(sys.stderr))
    except PowerUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: no verdict", file=sys.stderr)
        return 130
    figures = soak_figures(result, backend=args.backend)
    cuts = trial.power.cuts
    figures.update(setting=setting.label, power_cuts=len(cuts), commits_lost=sum(c.commits for c in cuts),
                   commits_lost_per_cut=[c.commits for c in cuts],
                   lost_named=[what for c in cuts for what in c.lost][:VIOLATIONS_SHOWN_MAX])
    if args.json:
        print(json.dumps(figures, sort_keys=True), file=out, flush=True)
    else:
        lines = format_soak(result, figures).split("\n")
        lines.insert(-1, f"power cuts:    {len(cuts)} ({setting.label}); acknowledged commits lost per cut: "
                         f"{', '.join(str(c.commits) for c in cuts) or 'none'}")
        lines[-1:-1] = [f"  lost: {what}" for what in figures["lost_named"][:5]]
        print("\n".join(lines), file=out, flush=True)
    return 0 if result.ok else 1


def _check(args: argparse.Namespace) -> str | None:
    error = check_numbers(jobs=args.jobs, workers=args.workers, kill_every=args.kill_every, lease=args.lease,
                          timeout=args.timeout, power_every=args.power_every)
    if error:
        return error
    if args.power_every > 0 and args.db is not None:
        return "--power-every cuts the power of a database the soak creates on an image of its own: leave out --db"
    if args.power_every > 0 and args.power_every <= args.lease:
        return (f"--power-every {args.power_every:g} is not longer than the lease ({args.lease:g} s): a job claimed before a cut "
                "waits out its lease after it, so no job would ever finish; pass a longer gap or a shorter --lease")
    if args.synchronous is not None and args.power_every <= 0:
        return "--synchronous is the setting under power cuts: pass --power-every too"
    if args.synchronous is not None:
        from chaos.hostfaults.power_runs import level_setting

        try:
            level_setting(args.backend, args.synchronous)
        except ValueError as exc:
            return str(exc)
    if args.db is not None and is_postgres(args.db) != (args.backend == "postgresql"):
        return (f"--db {PostgresStore.redacted(args.db)!r} does not match --backend {args.backend}; pass a postgresql:// URL "
                "with --backend postgresql, a path otherwise")
    if args.db is not None and args.backend == "sqlite":
        error = check_new_sqlite_path(args.db)
        if error:
            return error
        for path in (args.db, f"{args.db}-chaos"):
            if os.path.exists(path):
                return f"--db {args.db}: {path} exists; a soak judges a whole history, so pass a new path or remove it"
    return None


class _Unavailable(RuntimeError):
    pass


@contextmanager
def _database(backend: str, db: str | None) -> Iterator[tuple[str, str]]:
    """``(db, directory for the ledgers)``; temporary ones (a file, or a whole server) are removed after."""
    if backend == "sqlite" and db is not None:
        yield db, f"{db}-chaos"
        return
    # A database the caller named (or a throwaway server's) keeps its data; the ledgers are temporary.
    directory = tempfile.mkdtemp(prefix=f"crashgate-soak-{backend}-")
    server = None
    try:
        if backend == "sqlite":
            db = os.path.join(directory, "soak.db")
        elif db is None:
            server = _start_server()
            db = server.create_database("soak")
        yield db, directory
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def _reachable(db: str) -> None:
    """Connect to a PostgreSQL ``db`` once before any process starts: a server that cannot be
    reached is the setting's fault (:class:`_Unavailable`), said in the store's words (no password)."""
    if not is_postgres(db):
        return
    try:
        PostgresStore(db).close()
    except InvalidInput as exc:
        raise _Unavailable(str(exc)) from None


def _start_server() -> Any:
    from engine.pgserver import ServerUnavailable, TemporaryPostgres

    try:
        server = TemporaryPostgres()
        server.start()
    except ServerUnavailable as exc:
        raise _Unavailable(f"cannot start a throwaway PostgreSQL server: {exc}; or pass --db postgresql://...") from exc
    return server


class _ProgressLines:
    """A progress line on stderr every few seconds (a soak runs for minutes, often without a terminal)."""

    def __init__(self, out: TextIO, header: str | None = None) -> None:
        self.out = out
        self.last = 0.0
        self.header = header  # said once the processes run: a soak that cannot start says only why

    def __call__(self, progress: Progress, run: FleetRun) -> None:
        if self.header is not None:
            print(self.header, file=self.out, flush=True)
            self.header = None
        if time.monotonic() - self.last < PROGRESS_EVERY_S and not progress.done:
            return
        self.last = time.monotonic()
        print(f"[{run.seconds:7.1f}s] {progress.settled:,}/{progress.total:,} settled, outbox unsent {progress.unsent}, "
              f"kills {len(run.kills)}", file=self.out, flush=True)


def soak_figures(result: TrialResult, *, backend: str) -> dict[str, Any]:
    """The soak's figures as one JSON-ready object."""
    f = result.verdict.figures
    run = result.run
    workers_killed = sum(1 for k in run.kills if k.role == "worker")
    headline = (f["lost_jobs"], f["spend_after_memo"], f["duplicate_effects"], f["illegal_transitions"])
    return {
        "backend": backend,
        "workers": result.config.workers,
        "jobs": f["jobs"],
        "kill_every_s": result.config.kill_every_s,
        "seed": result.config.seed,
        "seconds": round(result.settle_s, 2),
        "jobs_per_s": round(result.jobs_per_s, 2),
        "kills": len(run.kills),
        "kills_workers": workers_killed,
        "kills_sender": len(run.kills) - workers_killed,
        "paid_calls": f["paid_calls"],
        "spend_usd": f["spend_usd"],
        "wasted_calls": f["wasted_calls"],
        "wasted_usd": f["wasted_usd"],
        "zombie_calls": f["zombie_calls"],
        "lost_jobs": f["lost_jobs"],
        "spend_after_memo": f["spend_after_memo"],
        "duplicate_effects": f["duplicate_effects"],
        "illegal_transitions": f["illegal_transitions"],
        "headline": "/".join(str(n) for n in headline),
        "states": f["states"],
        "receiver": f["receiver"],
        "violations": f["violations"],
        "harness_errors": f["harness_errors"],
        "failed_by_harness": f["failed_by_harness"],
        "unexpected_exits": len(run.unexpected_exits),
        "drained": run.drained,
        "ok": result.ok,
    }


def format_soak(result: TrialResult, figures: dict[str, Any]) -> str:
    g = figures
    states = ", ".join(f"{n:,} {s}" for s, n in g["states"].items())
    receiver = g["receiver"]
    held = sum(1 for n in g["violations"].values() if n == 0)
    out = [
        f"soak on {g['backend']}: {g['workers']} workers + 1 sender, {g['jobs']:,} jobs, a SIGKILL every {g['kill_every_s']:g} s on average (seed {g['seed']})",
        f"jobs/s:        {g['jobs_per_s']:.1f} ({g['jobs']:,} jobs settled in {g['seconds']:.1f} s: {states})",
        f"kills:         {g['kills']:,} ({g['kills_workers']:,} workers, {g['kills_sender']:,} sender)",
        f"wasted calls:  {g['wasted_calls']:,} of {g['paid_calls']:,} paid (${g['wasted_usd']:.4f} of ${g['spend_usd']:.4f})",
        f"receiver:      {receiver['requests']:,} requests received, {receiver['applied']:,} effects applied",
        f"lost jobs / spend after memo / duplicate applied effects / illegal transitions: {g['headline']}",
        f"invariants:    {held} of {len(g['violations'])} held",
    ]
    for v in result.verdict.violations[:VIOLATIONS_SHOWN_MAX]:
        out.append(f"  VIOLATION {v}")
    if g["harness_errors"]:
        worker, job_id, step, _at, error = result.verdict.harness_errors[-1]
        out.append(f"  HARNESS FAILED: the model probe could not read the database {g['harness_errors']:,} times "
                   f"({g['failed_by_harness']:,} jobs ended failed by it; last: {job_id} {step} on {worker}: {error}); "
                   "the run proves nothing about the engine: check that the database server stays reachable")
    for report in result.run.unexpected_exits[:3]:
        out.append(f"  PROCESS DIED BY ITSELF: {report}")
    if not result.run.drained:
        out.append(f"  NOT DRAINED within {result.config.timeout_s:.0f} s")
    if not result.kills_ok:
        out.append(f"  TOO FEW KILLS: {g['kills']} landed, --kills-min is {result.config.kills_min}")
    out.append("OK" if result.ok else f"FAILED: re-run with --seed {g['seed']} to repeat the kill schedule")
    return "\n".join(out)


def throughput_rows(quick: bool, *, backends: Sequence[str] = BACKENDS) -> list[dict[str, Any]]:
    """Jobs/s with 1, 2 and 4 workers on each backend, 20 ms per model call, no monkey.

    Each row is ``{"key", "label", "value", "unit", "note"}`` (the fields of ``benchmarks.Row``); a
    backend that cannot run here (no PostgreSQL binaries) gives rows with ``value`` None and the
    one-line reason in ``skipped``. On
    PostgreSQL one throwaway server holds a fresh database per row.
    """
    jobs = BENCH_JOBS_QUICK if quick else BENCH_JOBS
    rows = []
    for backend in backends:
        server = None
        try:
            if backend == "postgresql":
                server = _start_server()
            for workers in BENCH_WORKERS:
                db = None if server is None else server.create_database(f"bench_{workers}w")
                rows.append(_throughput_row(backend, db, workers, jobs))
        except _Unavailable as exc:
            for workers in BENCH_WORKERS:
                rows.append({"key": _bench_key(backend, workers), "label": _bench_label(backend, workers), "value": None,
                             "unit": "jobs/s", "note": "", "skipped": str(exc)})
        finally:
            if server is not None:
                server.stop()
    return rows


def _bench_key(backend: str, workers: int) -> str:
    return f"soak.{backend}.{workers}w"


def _bench_label(backend: str, workers: int) -> str:
    return f"{backend}, {workers} worker process{'es' if workers > 1 else ''}, 20 ms model latency"


def _throughput_row(backend: str, db: str | None, workers: int, jobs: int) -> dict[str, Any]:
    with _database(backend, db) as (path, directory):
        config = FleetConfig(db=path, directory=directory, workers=workers, latency_ms=BENCH_LATENCY_MS, kill_every_s=0.0, seed=workers)
        result = Trial(config, jobs, drop_every=0, fail_every=0).run()
    note = f"{jobs} jobs, no kills, real processes; invariants {'held' if result.ok else 'VIOLATED'}"
    return {"key": _bench_key(backend, workers), "label": _bench_label(backend, workers),
            "value": round(result.jobs_per_s, 2), "unit": "jobs/s", "note": note}
