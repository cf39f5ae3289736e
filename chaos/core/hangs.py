"""The watchdog's bound on a scenario, and what a scenario that hung leaves to read.

A scenario forks its workers (the doomed one, one frozen, another run meanwhile, the recovery)
and waits for each. A worker that never ends (a lock retried without limit, a call that never
returns, a resumed worker waiting for a peer that is gone) would hold the whole run: nothing
printed until someone kills it. So every scenario runs under
:func:`chaos.core.process.watchdog`: past its bound, every thread's stack of each of its
processes is taken, they are killed, and the scenario's result is a ``hangs`` finding; the run
goes on with the next scenario.

The bound is ``--scenario-timeout`` (the plugin's ``--chaos-scenario-timeout``), else the
adapter's ``scenario_timeout_s``, else :data:`SCENARIO_TIMEOUT_S`; a family's points get at
least :data:`BASELINE_FACTOR` times what its run without any fault took, so that a slow engine
is not reported as hung for being slow.

>>> bound_s(None, given=2.0)
2.0
>>> print(trimmed('Current thread 0x1 (most recent call first):\\n'
...               '  File "/app/steps.py", line 12 in fetch\\n'
...               f'  File "{HARNESS_DIR}/core/scenario.py", line 80 in body'))
Current thread 0x1 (most recent call first):
  File "/app/steps.py", line 12 in fetch
"""

from __future__ import annotations

import math
import os
import re
import sysconfig
from typing import Any, Iterable

__all__ = ["SCENARIO_TIMEOUT_S", "BASELINE_FACTOR", "HARNESS_DIR", "bound_s", "check_timeout", "trimmed", "stuck_at", "stacks_json"]

# A scenario takes milliseconds to a few seconds (an engine that launches slowly, a PostgreSQL
# database copied for it); a minute is far past any that is not stuck, and short enough that a
# run with a few stuck scenarios still ends in a CI job's time.
SCENARIO_TIMEOUT_S = 60.0
# A scenario runs the doomed iteration and a recovery, each about what the baseline ran (and the
# baseline was recorded under a line tracer): ten times it leaves room for a loaded machine.
BASELINE_FACTOR = 10.0
HARNESS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # chaos/
_ADAPTERS_DIR = os.path.join(HARNESS_DIR, "adapters")  # an engine's adapter: its frames are the engine's
_STDLIB_DIRS = tuple({os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib")})
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)')


def check_timeout(value: Any, source: str) -> float:
    """``value`` as a scenario's bound in seconds, or ValueError naming it, where it came from and
    the fix."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"scenario timeout {value!r} (from {source}) is not a number of seconds > 0; give e.g. 60")
    return seconds


def bound_s(declared_s: float | None, baseline_s: float = 0.0, *, given: float | None = None) -> float:
    """How long one scenario may run: ``given`` (the run's setting), else ``declared_s`` (the
    target's ``scenario_timeout_s``, checked when it was resolved), else :data:`SCENARIO_TIMEOUT_S`;
    at least :data:`BASELINE_FACTOR` times ``baseline_s``, what the family's run without any fault took."""
    if given is None:
        given = declared_s if declared_s is not None else SCENARIO_TIMEOUT_S
    return max(given, BASELINE_FACTOR * baseline_s)


def _harness(path: str) -> bool:
    """Whether a frame in ``path`` is the harness's or the standard library's (not the user's,
    the engine's or its adapter's)."""
    if path.startswith("<"):  # a frozen module of the interpreter's own (<frozen runpy>)
        return True
    real = os.path.realpath(path)
    if real.startswith(_STDLIB_DIRS) and "site-packages" not in real:
        return True
    return real.startswith(HARNESS_DIR + os.sep) and not real.startswith(_ADAPTERS_DIR + os.sep)


def trimmed(text: str) -> str:
    """A faulthandler dump with only the user's and the engine's frames: each thread's header,
    then its frames outside the harness and the standard library (a thread with none is left out)."""
    out: list[str] = []
    header = ""
    for line in text.splitlines():
        found = _FRAME.match(line)
        if found is None:
            if line.strip():
                header = line
            continue
        if _harness(found["path"]):
            continue
        if header:
            out.append(header)
            header = ""
        out.append(line)
    return "\n".join(out)


def stuck_at(stacks: Iterable[Any]) -> str:
    """Where the first process that hung was stuck: its most recent frame of the user's or the
    engine's code (``path:line in function``), or "" where no such frame was seen."""
    for stack in stacks:
        for line in stack.text.splitlines():
            found = _FRAME.match(line)
            if found is not None and not _harness(found["path"]):
                return f"{_short(found['path'])}:{found['line']} in {found['function']}"
        return ""
    return ""


def stacks_json(stacks: Iterable[Any]) -> list[dict[str, Any]]:
    """The stacks as a report keeps them: the user's and the engine's frames first, then the whole dump."""
    return [{"process": s.process, "pid": s.pid, "frames": trimmed(s.text), "full": s.text} for s in stacks]


def _short(path: str) -> str:
    cwd = os.getcwd()
    return os.path.relpath(path, cwd) if path.startswith(cwd + os.sep) else path
