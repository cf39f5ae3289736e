"""Collect every row of the table, in an order that keeps same-run comparisons fair.

The raw commit limit and the crashgate configurations are interleaved run by run (run 1 of each,
then run 2 of each, ...), so a burst of load from another process on the machine hits all of them
alike, and the share of the limit is the median of per-run ratios. Each peer runs in
its own process and its runs alternate with crashgate runs of the same size: every peer ratio is
the median of ratios of runs taken back to back, under the same load.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass

from chaos.hostfaults.power_runs import power_rows
from chaos.fleet.soak import throughput_rows as backend_throughput_rows
from engine import SqliteStore

from ._crashgate import STEPS, end_to_end, steps_us_per_job
from ._harness import harness_rows
from ._isolated import IsolatedFailure, IsolatedSession, call_isolated
from ._limit import cas_commits_per_s
from ._sql_floor import engine_sql_commits_per_s
from ._measure import Row, Sizes, median, ratio, skipped, temp_dir
from ._scaling import ScalingDb
from ._startup import startup_rows

__all__ = ["collect", "Report", "SYNC_LEVELS"]

SYNC_LEVELS = ("NORMAL", "FULL")
PAGE_SIZE = SqliteStore.page_size  # of the databases the engine creates
# The share of the raw commit rate the engine's own commits must reach (1 worker, steps inline):
# the rest of each commit is the engine's Python around its statements.
LIMIT_SHARE_TARGET = 0.25
PEER_TIMEOUT_S = 900.0


@dataclass
class Report:
    rows: list[Row]
    messages: list[str]  # one-line notes printed under the table (e.g. the harness skip line)


@dataclass(frozen=True)
class _Config:
    workers: int
    threaded: bool
    sync: str

    @property
    def key(self) -> str:
        return f"crashgate.{self.workers}w.{'threaded' if self.threaded else 'inline'}.{self.sync.lower()}"

    @property
    def label(self) -> str:
        mode = "step thread (default)" if self.threaded else "steps inline"
        return f"crashgate {self.workers} worker{'s' if self.workers > 1 else ''}, {mode}, {self.sync}"


CONFIGS = tuple(_Config(w, t, s) for s in SYNC_LEVELS for w in (1, 2) for t in (False, True))


def collect(sizes: Sizes, *, peers: bool = True, progress: Callable[[str], None] | None = None) -> Report:
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    rows: list[Row] = []
    messages: list[str] = []
    with temp_dir() as directory:
        say("limit (raw CAS commits) and crashgate end to end, a run of each in turn")
        limits, engine_rows, shares = _limit_and_crashgate_rows(directory, sizes, say)
        rows += limits + engine_rows
        rows += _limit_share_rows(by_key(rows), shares)
        if peers:
            say("peers")
            rows += _peer_rows(directory, sizes, say)
        say("scaling")
        rows += _scaling_rows(directory, sizes)
    say("backends: jobs/s with 1, 2 and 4 worker processes, 20 ms model latency")
    rows += [Row(**row) for row in backend_throughput_rows(sizes.quick)]
    say("power cuts: what each durability setting loses (root and loop devices, else skipped)")
    rows += [Row(**row) for row in power_rows(sizes.quick)]
    say("pytest start-up: an empty project with and without the crashgate plugin")
    rows += startup_rows(sizes)
    say("harness")
    harness, message = harness_rows(sizes.quick)
    rows += harness
    if message:
        messages.append(message)
    return Report(rows, messages)


def by_key(rows: list[Row]) -> dict[str, Row]:
    return {row.key: row for row in rows}


def _limit_and_crashgate_rows(directory: str, sizes: Sizes, say: Callable[[str], None]) -> tuple[list[Row], list[Row], dict[str, list[float]]]:
    """The raw CAS commit rate and crashgate's end-to-end runs, measured in turn within each run
    (a limit run, then the engine's), so that a ratio compares figures taken moments apart, not a
    minute apart while the machine's load moved. Returns the limit rows, the engine rows, and the
    per-run ratios: per SQLite level, crashgate's commits/s (1 worker, inline) to the limit; at
    NORMAL, the same to its own statements replayed without it (``engine_sql``), and those to the
    limit (``engine_sql_vs_limit``)."""
    limit_runs: dict[str, list[float]] = {sync: [] for sync in SYNC_LEVELS}
    same_pages_runs: list[float] = []  # the raw CAS on pages of the engine's size (NORMAL)
    floor_runs: list[float] = []  # the engine's own statements, replayed without it (NORMAL)
    results: dict[_Config, list] = {config: [] for config in CONFIGS}
    steps_us = []
    for run in range(sizes.runs):
        say(f"  run {run + 1}/{sizes.runs}")
        for sync in SYNC_LEVELS:
            commits = sizes.cas_commits if sync == "NORMAL" else sizes.cas_commits_full
            limit_runs[sync].append(cas_commits_per_s(directory, commits=commits, synchronous=sync))
        same_pages_runs.append(cas_commits_per_s(directory, commits=sizes.cas_commits, synchronous="NORMAL", page_size=PAGE_SIZE))
        floor_runs.append(engine_sql_commits_per_s(directory, jobs=sizes.jobs, synchronous="NORMAL"))
        steps_us.append(steps_us_per_job(max(sizes.jobs // 4, 5)))
        for config in CONFIGS:
            jobs = sizes.jobs if config.sync == "NORMAL" else sizes.jobs_full
            results[config].append(
                end_to_end(directory, jobs=jobs, synchronous=config.sync, workers=config.workers, threaded=config.threaded)
            )
    limits = [Row(f"limit.cas.{sync.lower()}", f"limit: raw sqlite3 CAS commit, WAL, {sync}", median(runs),
                  "commits/s", note="BEGIN IMMEDIATE, 1-row UPDATE, COMMIT", runs=runs) for sync, runs in limit_runs.items()]
    limits.append(Row("limit.cas.normal.engine_pages", f"limit: the same, NORMAL, {PAGE_SIZE}-byte pages (the engine's)",
                      median(same_pages_runs), "commits/s", note="SQLite's default is 4,096", runs=same_pages_runs))
    limits.append(Row("limit.engine_sql.normal", "the engine's own transactions, no engine, NORMAL", median(floor_runs), "commits/s",
                      note="its statements replayed on sqlite3 (benchmarks._sql_floor)", runs=floor_runs))
    shares: dict[str, list[float]] = {sync: [] for sync in SYNC_LEVELS}
    for config, runs in results.items():
        if config.workers == 1 and not config.threaded:
            for result, limit in zip(runs, limit_runs[config.sync]):
                if limit:
                    shares[config.sync].append(result.jobs_per_s * (result.commits / result.jobs) / limit)
    # The same pairs against the engine's statements alone: how much of what its SQL allows the
    # engine reaches (the rest is its Python), and how much of the raw limit its SQL allows.
    inline = results[_Config(1, False, "NORMAL")]
    shares["engine_sql"] = [r.jobs_per_s * (r.commits / r.jobs) / floor for r, floor in zip(inline, floor_runs) if floor]
    shares["engine_sql_vs_limit"] = [floor / limit for floor, limit in zip(floor_runs, limit_runs["NORMAL"]) if limit]
    shares["engine_pages"] = [r.jobs_per_s * (r.commits / r.jobs) / limit for r, limit in zip(inline, same_pages_runs) if limit]
    step_work_us = median(steps_us)
    rows = []
    for config, runs in results.items():
        rates = [r.jobs_per_s for r in runs]
        rate = median(rates)
        note = "us/step: wall time per job / 4, less step work" if config.workers == 1 else "us/step from the 2 workers' joint rate"
        rows.append(
            Row(config.key, config.label, rate, "jobs/s", us_per_step=(1e6 / rate - step_work_us) / STEPS,
                commits_per_job=median([r.commits / r.jobs for r in runs]), note=note, runs=rates)
        )
    rows.append(Row("crashgate.step_work_us", "the 4 steps' own work, called directly", step_work_us,
                    "us/job", note="subtracted above"))
    keyed = by_key(rows)
    for sync in SYNC_LEVELS:
        limit_key = f"crashgate.1w.inline.{sync.lower()}"
        row = keyed[limit_key]
        rows.append(Row(f"ratio.threaded_vs_inline.{sync.lower()}", f"step thread / inline, 1 worker, {sync}",
                        ratio(keyed[f"crashgate.1w.threaded.{sync.lower()}"].value, row.value), "x"))
    return limits, rows, shares


@dataclass(frozen=True)
class _Peer:
    key: str
    label: str
    package: str
    module: str
    kwargs: dict
    note: str
    dbos: bool = False


def _peers(sizes: Sizes) -> list[tuple[_Peer, int]]:
    from . import _peer_dbos, _peer_huey, _peer_litequeue, _peer_persistqueue

    return [
        (_Peer("peers.dbos", "DBOS Transact, 4-step workflow", "dbos", "benchmarks._peer_dbos", {}, _peer_dbos.NOTE, True),
         sizes.dbos_jobs),
        (_Peer("peers.huey.chained", "huey SqliteHuey, 4 chained tasks", "huey", "benchmarks._peer_huey", {"chained": True},
               _peer_huey.NOTE_CHAINED), sizes.peer_jobs),
        (_Peer("peers.huey.one_step", "huey SqliteHuey, 1-step tasks", "huey", "benchmarks._peer_huey", {"chained": False},
               _peer_huey.NOTE_ONE_STEP), sizes.peer_jobs),
        (_Peer("peers.persistqueue", "persist-queue SQLiteAckQueue", "persistqueue", "benchmarks._peer_persistqueue", {},
               _peer_persistqueue.NOTE), sizes.peer_jobs),
        (_Peer("peers.litequeue", "litequeue", "litequeue", "benchmarks._peer_litequeue", {}, _peer_litequeue.NOTE),
         sizes.peer_jobs),
    ]


def _limit_share_rows(keyed: dict[str, Row], shares: dict[str, list[float]]) -> list[Row]:
    """How much of the raw commit rate crashgate's own commits use (1 worker, steps inline): the
    median of the per-run ratios, each of a limit run and the engine run right after it."""
    rows = []
    for sync in SYNC_LEVELS:
        ours, limit = keyed[f"crashgate.1w.inline.{sync.lower()}"], keyed[f"limit.cas.{sync.lower()}"]
        of_medians = ratio((ours.value or 0) * (ours.commits_per_job or 0), limit.value)
        share = median(shares[sync]) if shares[sync] else None
        medians = "" if of_medians is None else f" (ratio of the medians {of_medians:.2f})"
        figure = "not measured" if share is None else f"{share:.2f} in this run{medians}"
        rows.append(Row(f"ratio.commits_vs_limit.{sync.lower()}", f"crashgate commits/s / raw limit, {sync}",
                        share, "x", note=f"1 worker, steps inline, median of per-run pairs; target >= {LIMIT_SHARE_TARGET:.2f}, {figure}",
                        runs=shares[sync]))
    for key, label, note in (
        ("engine_pages", f"crashgate commits/s / raw limit on {PAGE_SIZE}-byte pages, NORMAL",
         "1 worker, steps inline: the raw CAS on pages of the engine's size"),
        ("engine_sql_vs_limit", "the engine's statements alone / raw limit, NORMAL", "what its rows, indexes and pages allow"),
        ("engine_sql", "crashgate commits/s / its statements alone, NORMAL", "1 worker, steps inline: the rest is the engine's Python"),
    ):
        runs = shares.get(key, [])
        rows.append(Row(f"ratio.{key}.normal", label, median(runs) if runs else None, "x", note=f"{note}; median of per-run pairs", runs=runs))
    return rows


def _peer_rows(directory: str, sizes: Sizes, say: Callable[[str], None]) -> list[Row]:
    """Each peer's runs alternate with crashgate runs (1 worker, NORMAL): a ratio per pair."""
    rows = []
    for peer, jobs in _peers(sizes):
        say(f"  {peer.label}")
        label = f"{peer.label}, NORMAL"
        if importlib.util.find_spec(peer.package) is None:
            rows.append(skipped(peer.key, label, "jobs/s", f"{peer.package} not installed: pip install -e '.[bench]'"))
            continue
        try:
            rows += _paired(directory, sizes, peer, label, jobs)
        except IsolatedFailure as exc:
            rows.append(skipped(peer.key, label, "jobs/s", f"failed: {exc}"))
    return rows


def _paired(directory: str, sizes: Sizes, peer: _Peer, label: str, jobs: int) -> list[Row]:
    modes = (False, True) if peer.dbos else (False,)
    rates: list[float] = []
    ratios: dict[bool, list[float]] = {threaded: [] for threaded in modes}
    with IsolatedSession(peer.module, "Session", {"synchronous": "NORMAL", **peer.kwargs}, timeout_s=PEER_TIMEOUT_S) as session:
        for _ in range(sizes.runs):
            rate = session.run(jobs)
            rates.append(rate)
            for threaded in modes:
                ours = end_to_end(directory, jobs=sizes.jobs, synchronous="NORMAL", workers=1, threaded=threaded)
                ratios[threaded].append(ours.jobs_per_s / rate)
    short = peer.key.removeprefix("peers.")
    rows = [Row(peer.key, label, median(rates), "jobs/s", note=peer.note, runs=rates)]
    rows.append(Row(f"ratio.crashgate_vs_{short}", f"crashgate 1 worker inline / {peer.label}", median(ratios[False]), "x",
                    note="median of paired runs", runs=ratios[False]))
    if peer.dbos:
        rows.append(Row("ratio.crashgate_threaded_vs_dbos", f"crashgate 1 worker step thread / {peer.label}",
                        median(ratios[True]), "x", note="median of paired runs", runs=ratios[True]))
    return rows


def _scaling_rows(directory: str, sizes: Sizes) -> list[Row]:
    small, large = sizes.backlog_small, sizes.backlog_large
    dbs = {
        "backlog_small": ScalingDb.create(directory, "small", backlog=small, finished=0),
        "backlog_large": ScalingDb.create(directory, "large", backlog=large, finished=0),
        "finished": ScalingDb.create(directory, "finished", backlog=small, finished=sizes.finished),
    }
    labels = {
        "backlog_small": f"backlog {small:,} queued",
        "backlog_large": f"backlog {large:,} queued",
        "finished": f"backlog {small:,} + {sizes.finished:,} finished",
    }
    claims: dict[str, list[float]] = {name: [] for name in dbs}
    rates: dict[str, list[float]] = {name: [] for name in dbs}
    try:
        for _ in range(sizes.runs):
            for name, db in dbs.items():
                m = db.measure(claims=sizes.claims, jobs=sizes.scaling_jobs)
                claims[name].append(m.claim_us)
                rates[name].append(m.jobs_per_s)
    finally:
        for db in dbs.values():
            db.close()
    rows = []
    for name in dbs:
        rows.append(Row(f"scaling.claim_us.{name}", f"claim, {labels[name]}", median(claims[name]), "us",
                        note="one claim transaction, median", runs=claims[name]))
        rows.append(Row(f"scaling.jobs.{name}", f"throughput, {labels[name]}", median(rates[name]), "jobs/s",
                        note="run_once, steps inline", runs=rates[name]))
    base = median(rates["backlog_small"])
    rows.append(Row("ratio.scaling.backlog_large", f"throughput {large:,} / {small:,} backlog", ratio(median(rates["backlog_large"]), base), "x",
                    note="target >= 0.90"))
    rows.append(Row("ratio.scaling.finished", f"throughput with {sizes.finished:,} finished / without", ratio(median(rates["finished"]), base), "x",
                    note="target >= 0.90"))
    rss = call_isolated("benchmarks._scaling", "worker_rss_mib", {"path": dbs["backlog_large"].path, "jobs": sizes.scaling_jobs},
                        timeout_s=PEER_TIMEOUT_S)
    rows.append(Row("scaling.worker_rss_mib", f"peak RSS of a worker, {large:,} backlog", rss, "MiB",
                    note=f"fresh process, {sizes.scaling_jobs} jobs; getrusage ru_maxrss"))
    return rows
