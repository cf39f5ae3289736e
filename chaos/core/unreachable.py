"""Lines an engine declares no worker iteration can reach, each with its reason.

Crash coverage counts the executable lines of every function an iteration reached. Some of those
lines no iteration can reach however it is driven: a setting's check that raises before the first
claim, a programmer error's assertion, the schema's creation (done when the database is made). An
engine says so on the line, with the reason, as coverage.py's ``# pragma: no cover`` does::

    if attempts_max < 1:  # not a crash point: a bad setting, refused when the worker is made
        raise InvalidInput(...)

A marked line that opens a block (``if``, ``except``, ``def``) marks the whole block, as
coverage.py's exclusions do (its parser reads them). Crash coverage then counts the lines an
iteration can reach, lists the declared ones with their reasons, and reports any declared line
that a scenario killed at after all: the declaration is wrong, and the matrix says so.

>>> import tempfile, textwrap
>>> path = tempfile.mktemp(suffix=".py")
>>> _ = open(path, "w").write(textwrap.dedent('''
...     def f(x):
...         if x < 0:  # not a crash point: a bad setting
...             raise ValueError(x)
...         return x
... '''))
>>> declared_unreachable(path)
{3: 'a bad setting', 4: 'a bad setting'}
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["MARKER", "declared_unreachable"]

MARKER = "# not a crash point:"
_MARKER_RE = r"#\s*not a crash point:"
_REASON = re.compile(r"#\s*not a crash point:\s*(.*?)\s*$")


@lru_cache(maxsize=None)
def declared_unreachable(path: str) -> dict[int, str]:
    """The executable lines of the source file ``path`` declared unreachable, each with the reason
    written on its marker (a block's lines carry the reason of the line that opens it). A file
    that cannot be read or parsed declares nothing."""
    from coverage.parser import PythonParser  # here: a process that never reports coverage never loads coverage.py

    try:
        with open(path, encoding="utf-8") as source:
            lines = source.read().splitlines()
        parser = PythonParser(text="\n".join(lines) + "\n", exclude=_MARKER_RE)
        parser.parse_source()
    except Exception:  # unreadable, not Python (coverage.py's NotPython), not UTF-8: nothing declared
        return {}
    # A marker may sit on any line of a statement written over several: its reason is that
    # statement's, and the lines of a block it opens carry it too (they follow it in order).
    reasons: dict[int, str] = {}
    for number, text in enumerate(lines, start=1):
        found = _REASON.search(text)
        if found is not None:
            reasons[parser.first_line(number)] = found.group(1) or "(no reason given)"
    declared: dict[int, str] = {}
    reason = "(no reason given)"
    for number in sorted(parser.excluded | parser.raw_excluded):
        reason = reasons.get(parser.first_line(number), reason)
        declared[number] = reason
    return declared
