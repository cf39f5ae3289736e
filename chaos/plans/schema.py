"""A fault plan's vocabulary: every key a plan, its ``[points]`` section, a scenario, a fault and
an expectation may hold (each with what it holds: the text of every "allowed" message and of the
schema's reference page), every script verb, and the bound on every number a plan gives.

>>> sorted(PLAN_KEYS)
['lesson', 'points', 'scenario', 'target']
"""

from __future__ import annotations

import re

__all__ = [
    "GROUP_CLAIM", "GROUP_RELEASE", "GROUP_SEND", "PHASES", "POINT_FAULTS", "EXPECTED_ERRORS", "RESOLUTIONS", "JOBS_MAX",
    "JOB_POSITION", "RUN_MAX", "SECONDS_MAX", "SLOW_CALL_S_MAX", "RETRY_AFTER_S_MAX", "PER_JOB_MAX", "POLL_TICKS_MAX",
    "SETUP_FORM", "NAME_FORM", "PLAN_BYTES_MAX", "PLAN_KEYS", "POINTS_KEYS", "SCENARIO_KEYS", "FAULT_KEYS", "EXPECT_KEYS",
    "SCENARIO_ONLY_EXPECT", "BURST_KEYS", "GAP_KEYS", "ACTIONS"
]


# Points outside any step: before the worker's claim commits, after its last commit, the sender.
GROUP_CLAIM = "claim"
GROUP_RELEASE = "release"
GROUP_SEND = "send"
PHASES = ("worker", "sender")
# What happens at each point (chaos.matrix.runner.FAULTS): a kill, a freeze while another worker runs
# (lease valid, then expired), or two workers frozen in turn at a pair of points. A plan may also
# name a fault of the machine (chaos.hostfaults.faults.MACHINE_FAULTS: disk, io, lock, clock,
# damage) or one of its sub-kinds (disk-full, clock-skew, ...): see machine_fault_names().
POINT_FAULTS = ("crash", "pause", "interleave")
EXPECTED_ERRORS = ("conflict", "illegal")
RESOLUTIONS = ("reverify", "cancel")
JOBS_MAX = 1_000
JOB_POSITION = re.compile(r"<job [1-9][0-9]*>")  # a job named by position (chaos.adapter.job_ref), as a count gives them
# Every number a plan gives is bounded, so a typo (run = 10^12, duration_s = 1e308) is refused
# when the plan is collected instead of hanging the run. Seconds are of the harness's fake time.
RUN_MAX = 10_000  # worker iterations of one run action
SECONDS_MAX = 366 * 24 * 3600.0  # advance_s, poll_s, window and gap lengths: a year of fake time
SLOW_CALL_S_MAX = 24 * 3600.0  # duration_s of a slow call (spent in heartbeat slices)
RETRY_AFTER_S_MAX = 24 * 3600.0  # a 429's Retry-After
PER_JOB_MAX = 100  # calls of each job a per_job fault hits (an engine gives up long before)
POLL_TICKS_MAX = 100_000  # poll_s / tick_s (chaos.core.sandbox refuses more at run time)
SETUP_FORM = re.compile(r"^(run|send|advance:\d+(\.\d+)?|claim(:[A-Za-z0-9_.-]+)?)$")
NAME_FORM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
PLAN_BYTES_MAX = 1 << 20  # a plan is a page of TOML; a larger file is the wrong file

# key -> what it holds (the text of every "allowed" message, and of README.md's schema).
PLAN_KEYS = {
    "lesson": "one sentence: what the plan teaches (shown in failures and the report)",
    "target": "the adapter as MODULE:ATTR (default: the --chaos-target setting)",
    "points": "table: kill a worker at every crash point of one iteration",
    "scenario": "array of tables: scripted scenarios",
}
POINTS_KEYS = {
    "jobs": "job ids submitted first, each with the adapter's payload(job_id) (list of strings, or a count N: the adapter's first N job_ids, doc-1..doc-N by default; default: its first; [] for none)",
    "setup": "clean actions before the doomed iteration: run, send, advance:<s>, claim[:<worker>]",
    "phase": "what the doomed iteration runs: worker or sender",
    "faults": "faults armed for the doomed iteration (list of fault tables)",
    "second_worker": "a slow call lets a second worker run meanwhile (bool)",
    "steps": "which groups of points: claim, a step name, release (worker phase) or send",
    "deep": "also the lines of what the iteration calls, not only its own (bool, default true)",
    "fault": "what happens at each point: crash, pause, interleave, a fault of the machine (disk, io, lock, clock, damage, power, "
             "or a sub-kind such as disk-full), or a list of them (default: the --chaos-faults setting)",
    "expect": "checks on every point's outcome after recovery (an expect table)",
}
SCENARIO_KEYS = {
    "name": "the test item's name (letters, digits, _ . -)",
    "lesson": "this scenario's own lesson (default: the plan's)",
    "jobs": "job ids submitted first, each with the adapter's payload(job_id) (list of strings, or a count N: the adapter's first N job_ids, doc-1..doc-N by default; default: its first; [] for none)",
    "script": "the actions, in order (list of action tables)",
    "expect": "checks once the script ran and the system drained (an expect table)",
}
FAULT_KEYS = {
    "kind": "the fault kind",
    "task": "the call it hits: a step's model task, fetch (documents) or send (receiver); default any",
    "sticky": "fail every matching call, not only the next (bool)",
    "retry_after_s": "a 429's Retry-After (number)",
    "duration_s": "how long a slow call takes, or how long a failing one takes to fail (number)",
    "per_job": "with sticky: hit only each job's first N calls of the task, an outage every job meets and outlives (int)",
}
EXPECT_KEYS = {
    "state": "every job ends in this state",
    "states": "table job id -> the state it ends in",
    "calls": "table step -> paid calls made during that step, all jobs together",
    "applied": "effects applied at the receiver (int)",
    "wasted_max": "wasted paid calls, at most (int)",
    "job_rows": "job rows in the database (int; scenarios only)",
    "burst_max": "{ step, max, window_s = 1.0, from_s = 0.0 }: at most max calls in any window (scenarios only)",
    "call_gap_min": "{ step, seconds }: calls of one job's step at least this far apart (scenarios only)",
}
SCENARIO_ONLY_EXPECT = ("job_rows", "burst_max", "call_gap_min")
BURST_KEYS = {"step": "the step", "max": "calls allowed in any window", "window_s": "window length (s)", "from_s": "count calls from this many seconds after the start"}
GAP_KEYS = {"step": "the step", "seconds": "the least time between two calls of one job"}

# verb -> (what the verb's value is, the other keys it allows)
ACTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "submit": ("job id", ("payload", "expect_error", "worker")),
    "run": ("worker iterations (int)", ("worker",)),
    "send": ("true: outbox passes until none is due", ("worker",)),
    "advance_s": ("seconds of fake time", ()),
    "poll_s": ("seconds a worker polls, running what is due at each tick", ("tick_s", "worker")),
    "drain": ("true: run until every job is settled, moving time to each due retry", ("worker",)),
    "fault": ("a fault kind, armed now", ("task", "sticky", "retry_after_s", "duration_s", "per_job")),
    "heal": ("true: every armed fault is gone", ()),
    "requeue": ("job id", ("expect_error", "worker")),
    "resolve": ("job id", ("action", "expect_error", "worker")),
    "cancel": ("job id", ("expect_error", "worker")),
    "expect": ("an expect table, checked now", ()),
}
